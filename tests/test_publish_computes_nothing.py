"""publish/ formats what analyze/ computed: no verdict word, ratio, interval or p-value is derived in
harness/publish/ (issue 51, item 2). Two views of one study that decide a cell apart are how a page came
to print two verdicts for one cell; so the deciding lives in harness/analyze/ (the one verdict object is
`harness.analyze.verdicts.study_verdicts`) and publish/ only reads and words it.

The scan reads each publish/ module's syntax tree and flags three forms of deriving:
- a call into the deciding code: a function (not a type or a constant) of `harness.analyze.stats`,
  `harness.analyze.significance` or `harness.analyze.simulation`, or anything of `scipy` or `statistics`;
- a verdict word chosen by a numeric comparison: a conditional whose test compares with `<`, `>`, `<=`
  or `>=` and whose branches hold a verdict word ("faster", "slower", "equivalent", "beyond chance", ...);
  choosing wording by `==` or `in` on a verdict analyze/ gave is reading it, and is not flagged;
- arithmetic on a statistic: `+ - * / **`, `math.log`/`exp` or `np.log`/`exp` where an operand is named as
  a ratio, a p-value or an interval end (`ratio`, `p`, `p_value`, `ci_low`, `ci_high`, ...).
Each form is proved to fail on a planted violation below, in a source string of its own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.core import paths

PUBLISH = paths.PROJ_ROOT / "harness" / "publish"
DECIDING_MODULES = ("harness.analyze.stats", "harness.analyze.significance", "harness.analyze.simulation")
FOREIGN_DECIDERS = ("scipy", "statistics")
VERDICT_RE = re.compile(r"\b(faster|slower|equivalent|undecided|beyond chance|no difference|significant|"
                        r"not significant|decided)\b", re.IGNORECASE)
STAT_RE = re.compile(r"^(p|pval|p_value|pvalue|p_values|p_adj|ratio|ratios|ci_low|ci_high|ci_lo|ci_hi|low|high)$|"
                     r"_ratio$|^ratio_")
ORDERING = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)
ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.FloorDiv)

# publish/ module (relative to harness/publish) -> function (dotted, as `findings` names it) whose findings
# stay, with why. Everything else the scan finds is moved into analyze/.
ALLOWED: dict[str, dict[str, str]] = {
    "figures.py": {"ratio_vs_decode": "drawing only: matplotlib's errorbar takes an interval as distances from its "
                                      "point, so the interval analyze/ computed (RepeatStudy.table's ci_low, "
                                      "ci_high) is turned into bar lengths; no number a reader sees is derived"},
}


def _name(node: ast.AST) -> str | None:
    """The identifier an operand is known by: a name, an attribute, or a subscript by a string key."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("astype", "item"):
        return _name(node.func.value)   # x["ratio"].astype(float) is still the ratio
    return None


def _is_stat(node: ast.AST) -> bool:
    n = _name(node)
    return n is not None and STAT_RE.search(n) is not None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _has_verdict_word(node: ast.AST) -> bool:
    return any(VERDICT_RE.search(s) for s in _strings(node))


def _orders(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Compare) and any(isinstance(op, ORDERING) for op in n.ops) for n in ast.walk(test))


def _imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(functions imported from a deciding module, names a deciding module itself is bound to)."""
    funcs: set[str] = set()
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in DECIDING_MODULES:
                funcs |= {a.asname or a.name for a in node.names}
            elif node.module.split(".")[0] in FOREIGN_DECIDERS:
                # `from scipy import stats` binds a module, `from statistics import median` a function.
                funcs |= {a.asname or a.name for a in node.names}
                modules |= {a.asname or a.name for a in node.names}
            elif node.module == "harness.analyze":
                modules |= {a.asname or a.name for a in node.names if f"harness.analyze.{a.name}" in DECIDING_MODULES}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in DECIDING_MODULES or a.name.split(".")[0] in FOREIGN_DECIDERS:
                    modules.add(a.asname or a.name.split(".")[0])
    # A type (Ratio) or a constant (ALPHA, METHOD) of a deciding module is read, not called to decide.
    return {f for f in funcs if not f[:1].isupper()}, modules


def _finding(node: ast.AST, funcs: set[str], modules: set[str]) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and f.id in funcs:
            return f"calls {f.id}() of a deciding module"
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules \
                and not f.attr[:1].isupper():
            return f"calls {f.value.id}.{f.attr}()"
        if isinstance(f, ast.Attribute) and f.attr in ("log", "exp", "log1p", "expm1") and any(_is_stat(a) for a in node.args):
            return f"{f.attr}() of a statistic"
    elif isinstance(node, ast.IfExp) and _orders(node.test) and (
            _has_verdict_word(node.body) or _has_verdict_word(node.orelse)):
        return "a verdict word chosen by a numeric comparison"
    elif isinstance(node, ast.If) and _orders(node.test) and any(
            isinstance(s, (ast.Return, ast.Assign)) and s.value is not None and _has_verdict_word(s.value)
            for s in node.body + node.orelse):
        return "a verdict word chosen by a numeric comparison"
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ARITH) and (_is_stat(node.left) or _is_stat(node.right)):
        return f"arithmetic on {_name(node.left) if _is_stat(node.left) else _name(node.right)}"
    return None


def findings(source: str) -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) for every form of deriving in one module's source; "" for
    module level."""
    tree = ast.parse(source)
    funcs, modules = _imports(tree)
    out: set[tuple[str, int, str]] = set()

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            where = f"{where}.{node.name}" if where else node.name
        what = _finding(node, funcs, modules)
        if what:
            out.add((where, node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(tree, "")
    return sorted(out, key=lambda f: (f[1], f[2]))


def test_publish_derives_no_verdict_ratio_interval_or_p_value() -> None:
    found = []
    for path in sorted(PUBLISH.rglob("*.py")):
        rel = path.relative_to(PUBLISH).as_posix()
        allowed = ALLOWED.get(rel, {})
        found += [f"harness/publish/{rel}:{line} ({where or 'module level'}): {what}"
                  for where, line, what in findings(path.read_text(encoding="utf-8")) if where not in allowed]
    assert not found, ("derived in publish/ (compute it in harness/analyze/ and read it here):\n" + "\n".join(found))


def test_every_allowance_still_covers_a_finding() -> None:
    # An allowance whose finding is gone (moved into analyze/, or its function renamed) is removed with it,
    # so that it cannot cover a new one.
    for rel, where in ALLOWED.items():
        got = {w for w, _, _ in findings((PUBLISH / rel).read_text(encoding="utf-8"))}
        assert set(where) <= got, (rel, sorted(set(where) - got))


PLANTED = {
    "significance call": "from harness.analyze.stats import band_side\nside = band_side(r, 0.05)\n",
    "module call": "from harness.analyze import significance\nv = significance.decide(a, b)\n",
    "scipy": "from scipy import stats\nt = stats.ttest_ind(a, b)\n",
    "verdict by threshold": "verdict = 'faster, beyond chance' if p < 0.05 else 'no difference established'\n",
    "verdict by if": "def f(ratio):\n    if ratio > 1.02:\n        return 'faster'\n    return 'flat'\n",
    "ratio arithmetic": "pct = (c.ratio - 1) * 100\n",
    "interval arithmetic": "err = row['ci_high'].astype(float) - y\n",
    "log of a ratio": "import math\nd = math.log(ratio)\n",
}
CLEAN = ("from harness.analyze.stats import METHOD, Ratio\n"
         "word = {'faster': 'faster', 'slower': 'slower'}[v.cls]\n"
         "note = 'faster' if v.cls == 'faster' else 'undecided'\n"
         "cell = f'{v.ratio:.3f} [{v.ci_low:.3f}, {v.ci_high:.3f}]'\n"
         "n = len(rows) + 1\n")


def test_the_scan_fails_on_each_planted_violation_and_passes_a_clean_view() -> None:
    for what, src in PLANTED.items():
        assert findings(src), f"the scan misses: {what}"
    assert findings(CLEAN) == []
