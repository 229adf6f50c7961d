"""Merging what the ranks observed into one report, without launching anything:
the same problem from several ranks is one finding that says on which ranks it
was seen, in every output format; and the checksum comparison behind HKL601."""

from __future__ import annotations

import json

import pytest

from hooklint.config import OUTPUT_FORMATS
from hooklint.runtime.frames import Site
from hooklint.runtime.observation import Observation

pytest.importorskip("torch")


def _obs(code="HKL602", line=7, subject="`model.0.weight`", message="a hook wrote `.grad`"):
    site = Site("train.py", line, 1)
    return Observation(code=code, key=(code, site, "zero_row"), site=site, message=message, help="fix it",
                       subject=subject, subject_noun="parameter")


def test_the_same_problem_on_every_rank_is_one_finding_naming_the_ranks():
    from hooklint.runtime.distributed_launch import observations_with_ranks

    merged = observations_with_ranks({0: [_obs()], 1: [_obs()]}, 2)
    assert len(merged) == 1
    assert merged[0].full_message == "a hook wrote `.grad` [every rank: 0, 1] (observed 2 times)"


def test_a_problem_of_some_ranks_says_which():
    from hooklint.runtime.distributed_launch import observations_with_ranks

    merged = observations_with_ranks({0: [], 1: [_obs()], 2: [], 3: [_obs(subject="`model.2.weight`")]}, 4)
    assert [o.full_message for o in merged] == [
        "a hook wrote `.grad` [ranks 1, 3 of 4]; the same for 1 other parameter: `model.2.weight`"]
    only = observations_with_ranks({0: [], 1: [_obs()]}, 2)
    assert only[0].full_message == "a hook wrote `.grad` [rank 1 of 2 only]"


def test_a_cross_rank_finding_is_kept_once():
    """HKL601 is made alike by every rank from the gathered checksums."""
    from hooklint.runtime.distributed_launch import observations_with_ranks

    diverged = _obs(code="HKL601", message="the gradient differs across ranks")
    merged = observations_with_ranks({0: [diverged, diverged], 1: [diverged, diverged]}, 2)
    assert [o.full_message for o in merged] == ["the gradient differs across ranks (observed 2 times)"]


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_every_output_format_carries_the_merged_finding(fmt, tmp_path, monkeypatch):
    from hooklint.cli.check import source_loader
    from hooklint.report import render, rule_catalog
    from hooklint.runtime.distributed_launch import observations_with_ranks
    from hooklint.runtime.session import Session

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("\n".join(f"line {i}" for i in range(1, 12)) + "\n")
    session = Session(codes=["HKL602"])
    session.merge(observations_with_ranks({0: [_obs()], 1: [_obs()]}, 2))
    text = render(session.report(), fmt, sources=source_loader(), catalog=rule_catalog())
    assert "HKL602" in text
    assert "every rank: 0, 1" in text
    if fmt == "json":
        assert json.loads(text)[0]["location"]["row"] == 7


def test_checksums_tell_real_divergence_from_summation_order():
    import torch

    from hooklint.runtime.distributed import _checksum_rows, _differ

    def _checksums(grads):
        return {name: tuple(row[1:]) for name, row in zip(grads, _checksum_rows(list(grads.values())).tolist())}

    torch.manual_seed(0)
    grad = torch.randn(1000)
    same = _checksums({"w": grad})["w"]
    assert not _differ([same, _checksums({"w": grad.clone()})["w"]])
    # the last bit of a few elements, as a reduction in another order may change it
    nudged = grad.clone()
    nudged[:3] = torch.nextafter(nudged[:3], torch.full((3,), float("inf")))
    assert not _differ([same, _checksums({"w": nudged})["w"]])
    # one element zeroed on one rank only, as a rank-local mask would do
    masked = grad.clone()
    masked[0] = 0
    assert _differ([same, _checksums({"w": masked})["w"]])
    assert _differ([same, _checksums({"w": grad * 2})["w"]])
    assert _differ([same, _checksums({"w": grad[:999]})["w"]])
    assert _checksum_rows([None, grad])[:, 0].tolist() == [0.0, 1.0]  # a None gradient is not compared


def test_cli_merges_ranks_through_the_session_fold(tmp_path, monkeypatch):
    """Observations pickle (ranks hand them back in files) and fold after the trip."""
    import pickle

    from hooklint.runtime.distributed_launch import observations_with_ranks
    from hooklint.runtime.distributed_launch import RankResult, merged, LaunchOutcome

    results = {rank: pickle.loads(pickle.dumps(RankResult(rank, 2, 0, [_obs()], []))) for rank in (0, 1)}
    observations, notices = merged(LaunchOutcome(0, results, 0))
    assert [o.full_message for o in observations] == [
        o.full_message for o in observations_with_ranks({0: [_obs()], 1: [_obs()]}, 2)]
    assert notices == []


def test_the_parent_of_a_launch_does_not_import_torch():
    """`hooklint run --nproc` waits for the ranks and merges their files without
    torch (importing it would add seconds after the program is done)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from hooklint.cli import build_parser\n"
        "import hooklint.cli.run\n"
        "from hooklint.runtime.script import check_target\n"
        "from hooklint.runtime.session import Session\n"
        "from hooklint.runtime.distributed_launch import LaunchOutcome, RankResult, merged\n"
        "from hooklint.runtime.frames import Site\n"
        "from hooklint.runtime.observation import Observation\n"
        "site = Site('train.py', 3)\n"
        "obs = Observation('HKL602', ('HKL602', site), site, 'm', 'h')\n"
        "ranks = {0: RankResult(0, 2, 0, [obs]), 1: RankResult(1, 2, 0, [obs])}\n"
        "observations, _ = merged(LaunchOutcome(0, ranks, 0))\n"
        "session = Session(codes=['HKL602'])\n"
        "session.merge(observations)\n"
        "assert [f.code for f in session.findings] == ['HKL602']\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
