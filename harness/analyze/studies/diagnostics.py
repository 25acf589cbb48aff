"""The diagnostic studies under one name, for callers that reach them as `diagnostics`.

Each study is its own module, and the notebooks import those directly:

- `harness.analyze.studies.repeat`: the repeat study, spread checks, main-table check, decode share.
- `harness.analyze.studies.moe_backend`: forced-backend arms, the MoE routing each run logged.
- `harness.analyze.studies.falsification`: the single-variable matrix and its conclusion.
- `harness.analyze.studies.dispersion`: dispersion, ratios and coverage across a study.
- `harness.analyze.studies.common`: what they share (list parameters, study folders, number formats).

vLLM log facts (`LOG_FACTS`, `log_facts`, `pf_mode`) live in `harness.core.logs`.
"""

from __future__ import annotations

from harness.core.logs import LOG_FACTS, log_facts, pf_mode
from harness.analyze.studies.common import fmt_pct, fmt_value, mad, names, scenario_series, study_path
from harness.analyze.studies.dispersion import (canonical_all, coverage_frame, dispersion_frame, exclusions_frame,
                                            ratio_frame, samples_frame, series_with)
from harness.analyze.studies.falsification import (FalsificationConclusion, FalsificationMatrix,
                                               falsification_matrix, single_variable_conclusion)
from harness.analyze.studies.moe_backend import ArmTable, arm_conclusion, arm_table
from harness.analyze.studies.repeat import (SIGNAL_RULE, RepeatStudy, decode_share, main_table_check, pair_label,
                                        repeat_conclusion, repeat_study, spread_check, spread_check_text)

__all__ = [
    "LOG_FACTS", "SIGNAL_RULE", "ArmTable", "FalsificationConclusion", "FalsificationMatrix", "RepeatStudy",
    "arm_conclusion", "arm_table", "canonical_all", "coverage_frame", "decode_share", "dispersion_frame", "exclusions_frame",
    "falsification_matrix", "fmt_pct", "fmt_value", "log_facts", "mad", "main_table_check",
    "names", "pair_label", "pf_mode", "ratio_frame", "repeat_conclusion", "repeat_study",
    "samples_frame", "scenario_series", "series_with", "single_variable_conclusion", "spread_check",
    "spread_check_text", "study_path",
]
