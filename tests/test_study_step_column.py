"""The study tables put the measured step error beside each probability a sweep cell measured
(`context._step_text`: 'b ± se' of the row's `step_<key>` columns), 'not measured' where the cell
ran without `step_runs`, and the rendered report shows the column."""

from __future__ import annotations

import math
import re

import pandas as pd

from tokensde.io.report import Section, _render
from tokensde.study import multi, phase
from tokensde.study.context import _NOT_MEASURED, _STEP_COLUMN, _step_text

NAN = math.nan


def _pair_row(beta, antipodal, **step):
    return {"beta": beta, "d": 3, "beta_c": 0.0, "runs": 20, "T": 10.0, "dt": 0.05,
            "antipodal": antipodal, "merged": 20 - antipodal, "theory_tol": 0.5, "theory": 0.5,
            "p_undecided": 0.0, "t_decided_median": 1.0, "t_decided_q90": 2.0, "seed": 7,
            "version": "x", **step}


def test_step_text_reads_the_row_or_says_not_measured():
    assert _step_text({}, "p_anti") == _NOT_MEASURED  # a table of cells without step_runs
    assert _step_text({"step_runs": NAN, "step_p_anti": NAN}, "p_anti") == _NOT_MEASURED
    assert _step_text({"step_runs": 16, "step_p_anti": -0.01234, "step_p_anti_se": 0.0051},
                     "p_anti") == "-0.0123 ± 0.0051"
    assert _step_text({"step_runs": 16, "step_p_anti": NAN, "step_p_anti_se": NAN},
                     "p_anti") == "no coupled run decided"
    assert _step_text({"step_runs": 16, "step_p_bipolar": 0.0}, "p_one_cluster") == (
        "no coupled run decided")


def test_the_phase_table_puts_the_step_error_beside_p_anti_and_the_report_renders_it():
    df = pd.DataFrame([_pair_row(0.5, 12, step_runs=16, step_p_anti=0.0312, step_p_anti_se=0.02),
                       _pair_row(1.0, 9)])  # a mixed table: NaN where a cell has no step_runs
    table = phase._phase_table(df)
    at = table.columns.index(_STEP_COLUMN)
    assert table.columns[at - 2:at + 2] == ["P_anti (decided)", "95%", _STEP_COLUMN,
                                            "with undecided"]
    assert [r[at] for r in table.rows] == ["+0.0312 ± 0.0200", _NOT_MEASURED]
    # the estimate and its bounds keep their places: 12/20 and 9/20 to one decimal
    assert [(r[at - 2], r[at + 1]) for r in table.rows] == [("0.6", "—"), ("0.5", "—")]
    html = _render([Section("phase", "Phase", "claim", tables=[table])])
    body = re.search(r'<table id="table-phase-grid".*?</table>', html, re.S)
    assert body and "+0.0312 ± 0.0200" in body.group(0) and ">not measured<" in body.group(0)
    assert "step error ± se" in body.group(0)


def test_the_multi_token_table_has_a_step_column_beside_single_and_bipolar_only():
    row = {"model": "noise", "n": 3, "d": 3, "beta": 1.0, "sigma": 1.0, "runs": 10,
           "horizon": 5.0, "tol": 1e-3, "dt": 0.02, "seed": 1, "version": "x"}
    for s, p in (("single", 0.3), ("bipolar", 0.6), ("undecided", 0.1)):
        row.update({f"p_{s}": p, f"p_{s}_lo": p - 0.1, f"p_{s}_hi": p + 0.1})
    measured = {**row, "beta": 2.0, "step_runs": 8, "step_p_one_cluster": 0.05,
                "step_p_one_cluster_se": 0.01, "step_p_bipolar": -0.04, "step_p_bipolar_se": 0.02}
    table = multi._multi_table(pd.DataFrame([row, measured]))
    steps = [i for i, c in enumerate(table.columns) if c == _STEP_COLUMN]
    assert [table.columns[i - 2] for i in steps] == ["P(single)", "P(bipolar)"]
    assert [[r[i] for i in steps] for r in table.rows] == [
        [_NOT_MEASURED, _NOT_MEASURED], ["+0.0500 ± 0.0100", "-0.0400 ± 0.0200"]]
