"""The HTML report and the figure registry: embedding, tables, failed sections, saved results."""

import base64
import dataclasses
import json
import re

import pytest
import typer
from PIL import Image as PILImage
from typer.testing import CliRunner

from tokensde import study
from tokensde.analysis.convergence import ConvergenceResult
from tokensde.cli import figure as figure_cli
from tokensde.io.report import Image, Section, Table, _fmt, _interval, _render, write_report
from tokensde.study.convergence import _convergence_tables, convergence_data


@pytest.fixture
def png(tmp_path):
    path = tmp_path / "dot.png"
    PILImage.new("RGB", (7, 5), (10, 20, 30)).save(path)
    return path


def _doc(png, **kw):
    tables = [Table("t1", "numbers <b>", ["name", "value", "95%"],
                    [["a<script>", 0.123456, (0.1, 0.2)], ["b", None, _interval(None, 1.0)]])]
    return [Section("s1", "First claim", "x & y", images=[Image(png, "cap")], tables=tables,
                    provenance={"seed": 5}),
            Section("s2", "Second", "needs a module", status="missing",
                    note="module foo is not available"), *kw.get("extra", [])]


def test_figures_are_embedded_and_decode_to_the_file(png):
    html = _render(_doc(png))
    uris = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(uris) == 1
    assert base64.b64decode(uris[0]) == png.read_bytes()
    # nothing is fetched from outside the file
    assert not re.search(r'(src|href)="(https?:|//|file:)', html)
    assert "<link" not in html and "<script" not in html


def test_tables_rows_escaping_and_number_format(png):
    html = _render(_doc(png))
    table = re.search(r'<table id="table-t1" data-rows="(\d+)">(.*?)</table>', html, re.S)
    assert table and table.group(1) == "2"
    assert table.group(2).count("<tr>") == 3  # header + 2 rows
    assert "a&lt;script&gt;" in html and "numbers &lt;b&gt;" in html and "x &amp; y" in html
    assert ">0.1235<" in html and ">[0.1, 0.2]<" in html and ">—<" in html
    assert '&quot;seed&quot;: 5' in html


def test_missing_section_says_what_is_missing(png):
    html = _render(_doc(png))
    sec = re.search(r'<section id="s2" data-status="missing">(.*?)</section>', html, re.S)
    assert sec and "module foo is not available" in sec.group(1)
    assert "1 ok, 1 missing" in html


@pytest.mark.parametrize(("value", "shown"), [
    (3.14159265, "3.142"), (1.5e-7, "1.500e-07"), (123456.0, "1.235e+05"), (0.0, "0"),
    (float("nan"), "—"), (None, "—"), (True, "yes"), (7, "7"), ((1.0, 2.5), "[1, 2.5]"),
])
def test_fmt(value, shown):
    assert _fmt(value) == shown


def test_bad_tables_and_statuses_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="rows"):
        Table("k", "c", ["a", "b"], [[1]])
    with pytest.raises(ValueError, match="status"):
        Section("k", "t", "c", status="great")
    with pytest.raises(ValueError, match="suffix"):
        Image(tmp_path / "x.bmp").data_uri()


def test_write_report_is_atomic_and_complete(png, tmp_path):
    out = write_report(_doc(png), tmp_path / "r" / "report.html", title="T")
    assert out.read_text().endswith("</html>\n")
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


def test_failure_becomes_a_failed_section(monkeypatch, tmp_path):
    def boom(ctx):
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(study.FIGURES, "histograms",
                        dataclasses.replace(study.FIGURES["histograms"], data=boom))
    sec = study.build_section("histograms", study.Context(tmp_path, "tiny"))
    assert sec.status == "failed" and "disk on fire" in sec.note


@pytest.fixture
def small_tiny(monkeypatch):
    """An even smaller 'tiny' convergence size for these tests."""
    from tokensde.analysis import convergence

    runs = {"two_tokens": 256, "eight_tokens": 256}
    monkeypatch.setitem(convergence._CONVERGENCE_SIZES, "tiny", convergence._Size(
        runs, runs, levels=(4, 8, 16), strong_ref=4))


def _app():
    app = typer.Typer()
    figure_cli.register(app)
    app.command("noop")(lambda: None)  # a second command keeps `figure` a sub-command
    return app


def test_figure_list():
    res = CliRunner().invoke(_app(), ["figure", "--list", "--json"])
    assert res.exit_code == 0, res.output
    names = json.loads(res.output)
    assert list(names) == ["tokens-in-motion", "phase-diagram", "theory-vs-simulation",
                           "phase-over-d", "decision-times", "trajectories",
                           "histograms", "multi-token", "variants", "mlp", "meanfield",
                           "token-noise", "convergence", "vit", "vit-depth", "real"]


def test_figure_rejects_unknown_name(tmp_path):
    res = CliRunner().invoke(_app(), ["figure", "nope", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "NAME must be one of" in res.output


@pytest.mark.slow
def test_figure_reuses_its_saved_result(tmp_path, monkeypatch, small_tiny):
    args = ["figure", "convergence", "--size", "tiny", "--out", str(tmp_path), "--workers", "1",
            "--json"]
    first = CliRunner().invoke(_app(), args)
    assert first.exit_code == 0, first.output
    out = json.loads(first.output[first.output.index("{"):])
    assert out["reused"] is False and out["tables"]["convergence-fits"] == 16
    data = tmp_path / "data" / "convergence-tiny.json"
    saved = ConvergenceResult.from_dict(json.loads(data.read_text()))
    # the second call must not simulate at all
    monkeypatch.setattr("tokensde.analysis.convergence.run_convergence",
                        lambda *a, **k: pytest.fail("re-ran a saved simulation"))
    second = CliRunner().invoke(_app(), args)
    assert second.exit_code == 0, second.output
    again = json.loads(second.output[second.output.index("{"):])
    assert again["reused"] is True and again["files"] == out["files"]
    tables = _convergence_tables(saved)
    assert [len(t.rows) for t in tables] == [len(saved.fits), sum(
        p["kind"] != "reference_correction" for p in saved.points), 4]


def test_interrupted_convergence_resumes_from_finished_chunks(tmp_path, monkeypatch,
                                                             small_tiny):
    from tokensde.analysis import convergence

    real, calls = convergence._task, []

    def flaky(args):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(args)
        return real(args)

    monkeypatch.setattr(convergence, "_task", flaky)
    ctx = study.Context(tmp_path / "a", "tiny", workers=1, progress=False)
    with pytest.raises(KeyboardInterrupt):
        convergence_data(ctx)
    assert len(list(ctx.data_path("convergence", ".parts").glob("*.npz"))) == 2
    calls.clear()
    monkeypatch.setattr(convergence, "_task", lambda args: (calls.append(args), real(args))[1])
    resumed, reused = convergence_data(ctx)
    assert not reused and len(calls) == 2  # only the two unfinished chunks ran
    assert not ctx.data_path("convergence", ".parts").exists()
    straight, _ = convergence_data(study.Context(tmp_path / "b", "tiny", workers=1,
                                                 progress=False))
    assert resumed.points == straight.points and resumed.fits == straight.fits
