"""Loading YAML into pydantic models with one-line errors that name the file and the key path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.core.errors import InvalidFileError

M = TypeVar("M", bound=BaseModel)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_KEYED = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*|\.\d+|\[\d+\])*): (.*)$", re.S)


def _key_parts(key: str) -> tuple:
    """`workloads[0].num_prompts` -> ("workloads", 0, "num_prompts")."""
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\[\]]+", key) if x)


def key_path(err: ValidationError) -> tuple[tuple, str]:
    """(the key path of the first error, its message). A validator that knows the key it refuses says
    so as "key: why" (a dotted path with [i] indexes, relative to where it runs); a field validator
    that names its own field ("legs[0]: ...") is not given the field twice."""
    first = err.errors()[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        return loc, "unknown key"
    if first["type"] == "value_error":
        msg = msg.removeprefix("Value error, ")
        m = _KEYED.match(msg)
        if m:
            parts = _key_parts(m.group(1))
            if loc and parts and parts[0] == loc[-1]:
                loc = loc[:-1]
            loc, msg = (*loc, *parts), m.group(2)
    return loc, msg


def describe(err: ValidationError) -> str:
    loc, msg = key_path(err)
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{_loc(loc)}: {msg}{more}"


# Every YAML file the project reads (scenarios, legs, study.yaml) is a few kilobytes; a cap keeps a
# wrong or hostile file from being parsed for minutes.
MAX_BYTES = 1 << 20
# Anchors and aliases are allowed (a scenario may share engine_args), but the document as expanded
# may hold at most this many nodes: a "billion laughs" file is refused before it is built.
MAX_NODES = 100_000


def _expanded_size(root: yaml.Node) -> int:
    """Nodes of the document with every alias expanded, counted without expanding them: an alias is
    the same node object, so each distinct node's size is computed once."""
    sizes: dict[int, int] = {}
    # Iterative post-order: a deep document must not hit the recursion limit either.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = ([c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode)
                    else list(node.value))
        if done:
            total = 1 + sum(sizes.get(id(c), 0) for c in children)
            sizes[id(node)] = min(total, MAX_NODES + 1)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _compose(path: Path) -> yaml.Node | None:
    try:
        size = Path(path).stat().st_size
        if size > MAX_BYTES:
            raise InvalidFileError(path, f"{size:,} bytes; a YAML input may hold at most {MAX_BYTES:,} (1 MiB)")
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidFileError(path, "no such file") from None
    except IsADirectoryError:
        raise InvalidFileError(path, "is a folder, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidFileError(path, f"cannot read: {e}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise InvalidFileError(path, f"{where}not valid YAML ({getattr(e, 'problem', e)})") from None
    except RecursionError:
        raise InvalidFileError(path, "not valid YAML (nested too deeply)") from None
    if node is not None and _expanded_size(node) > MAX_NODES:
        raise InvalidFileError(path, f"more than {MAX_NODES:,} values once its aliases are expanded; "
                                     "refused (a YAML alias bomb?)")
    return node


def _construct(path: Path, node: yaml.Node | None) -> object:
    if node is None:
        return None
    try:
        return yaml.SafeLoader("").construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise InvalidFileError(path, f"{where}not valid YAML ({getattr(e, 'problem', e)})") from None
    except RecursionError:
        raise InvalidFileError(path, "not valid YAML (nested too deeply)") from None


def read_yaml(path: Path) -> object:
    """The file's data, bounded: at most MAX_BYTES, at most MAX_NODES once aliases are expanded."""
    return _construct(path, _compose(path))


def line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest node on the key path `loc` that the document has."""
    line = None
    for part in loc:
        if node is None:
            break
        nxt = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    nxt, line = v, k.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            nxt = node.value[part]
            line = nxt.start_mark.line + 1
        node = nxt
    return line


def line_at(path: Path, loc: tuple) -> int | None:
    """The line of the key path `loc` in a YAML file already loaded once (so known to be readable)."""
    try:
        return line_of(_compose(path), loc)
    except Exception:  # noqa: BLE001 - a line number is a courtesy; the error is said without it
        return None


def describe_at(err: ValidationError, node: yaml.Node | None) -> str:
    """`describe`, prefixed with the line the failing key is on where the document has it."""
    line = line_of(node, key_path(err)[0])
    return f"line {line}: {describe(err)}" if line else describe(err)


def load_model(model: type[M], path: Path, **context: object) -> M:
    node = _compose(path)
    data = _construct(path, node)
    if not isinstance(data, dict):
        raise InvalidFileError(path, "expected a mapping at the top level")
    try:
        return model.model_validate(data, context=context or None)
    except ValidationError as e:
        raise InvalidFileError(path, describe_at(e, node)) from None


def validate_at(model: type[M], path: Path) -> tuple[object, M]:
    """(raw data, validated model) of a YAML file, errors with their line numbers."""
    node = _compose(path)
    data = _construct(path, node)
    if not isinstance(data, dict):
        raise InvalidFileError(path, "expected a mapping at the top level")
    try:
        return data, model.model_validate(data)
    except ValidationError as e:
        raise InvalidFileError(path, describe_at(e, node)) from None
