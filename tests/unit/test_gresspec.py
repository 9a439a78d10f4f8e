"""The one GRES/TRES spec parser (muster.common.gresspec) and its users: sbatch/srun
(cli.jobopts), the REST API (api.app.translate_job), scontrol update (controller.jobupdate)
and the submit-time shape check (controller.submit.check_types)."""

from __future__ import annotations

import pathlib

import pytest

from muster.common import gresspec
from muster.common.gresspec import GresSpecError, parse_gres, parse_typed_count

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "muster"


@pytest.mark.parametrize("spec,want", [
    ("gpu", [("gpu", None, 1)]),
    ("gres/gpu:2", [("gpu", None, 2)]),
    ("gres:gpu:a100:2", [("gpu", "a100", 2)]),
    ("gpu:a100", [("gpu", "a100", 1)]),
    ("gpu:1k", [("gpu", None, 1024)]),
    ("gpu:2, shard:4", [("gpu", None, 2), ("shard", None, 4)]),
    (" NONE ", []),
])
def test_parse_gres(spec, want):
    assert parse_gres(spec) == [{"name": n, "type": t, "count": c} for n, t, c in want]


@pytest.mark.parametrize("spec", ["", "gpu:", ":2", "gpu,,mps", "gpu:a:b:c", "gpu:a100:x"])
def test_parse_gres_refuses_malformed(spec):
    with pytest.raises(GresSpecError):
        parse_gres(spec)


@pytest.mark.parametrize("spec,want", [
    ("4", {"type": None, "count": 4}), ("a100:2", {"type": "a100", "count": 2}),
    ("gpu:a100:2", {"type": "a100", "count": 2}), ("a100", {"type": "a100", "count": 1})])
def test_parse_typed_count(spec, want):
    assert parse_typed_count(spec) == want


@pytest.mark.parametrize("spec", ["", "a:b:c", "a100:x", "a100:"])
def test_parse_typed_count_refuses_malformed(spec):
    with pytest.raises(GresSpecError):
        parse_typed_count(spec)


def test_wire_shape_checks():
    ok = [{"name": "gpu", "type": None, "count": 2}, {"name": "gpu"}]
    assert gresspec.valid_gres_list(ok, 2**53) is True
    assert gresspec.valid_gres_list({"name": "gpu"}, 2**53) is None
    assert gresspec.valid_gres_list([{}] * 17, 2**53) is None
    assert gresspec.valid_gres_list([{"name": "gpu", "count": True}], 2**53) is False
    assert gresspec.valid_gres_list([{"name": "gpu", "type": 3}], 2**53) is False
    assert gresspec.valid_typed_count({"type": "a100", "count": 1}, 2**53)
    assert not gresspec.valid_typed_count({"type": None, "count": 2**60}, 2**53)


def test_every_user_reads_specs_through_gresspec():
    from muster.api.app import translate_job
    from muster.api.jwtauth import Identity
    from muster.cli.getopt import CliExit
    from muster.cli.jobopts import parse_gres as cli_parse
    from muster.common.errors import RequestError
    from muster.controller.jobupdate import _p_gres

    spec = "gres:gpu:a100:2"
    assert cli_parse(spec) == parse_gres(spec) == _p_gres("Gres", spec, 0)
    req, _, _ = translate_job({"tres_per_node": spec, "tres_per_job": "gres/gpu:4"},
                              Identity("root", 0, 0))
    assert req["gres"] == parse_gres(spec) and req["gpus"] == {"type": None, "count": 4}
    with pytest.raises(CliExit):
        cli_parse("gpu:a100:x")
    with pytest.raises(RequestError):
        _p_gres("Gres", "gpu:a100:x", 0)
    # no second parser: the old hand-rolled ones are gone
    assert "_gres_spec" not in (SRC / "api" / "app.py").read_text()
    assert "def _tres_count" not in (SRC / "cli" / "jobopts.py").read_text()
