"""The Python bindings, one process per rank (started here, no launcher needed)."""
import json
import os

import pytest

import loom
import ranks

WORKER = os.path.join(os.path.dirname(__file__), "loom_worker.py")


def run_ranks(case, nranks, timeout=120):
    return ranks.run_ranks(WORKER, case, nranks, [loom.get_unique_id().hex()], timeout)


@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_collectives(nranks):
    codes, outputs = run_ranks("collectives", nranks)
    assert codes == [0] * nranks, "\n".join(outputs)


def test_bad_arguments_leave_the_communicator_usable():
    codes, outputs = run_ranks("bad_arguments", 2)
    assert codes == [0, 0], "\n".join(outputs)


def test_a_rank_that_exits_makes_the_others_raise():
    codes, outputs = run_ranks("rank_exits", 3)
    assert codes == [0, 3, 0], "\n".join(outputs)
    assert "rank 1" in outputs[0] + outputs[2]


def test_module_basics():
    assert loom.version() >= 100
    uid = loom.get_unique_id()
    assert len(uid) == 128
    # Used, so that its rendezvous root (a thread of this process, as NCCL's) is done with it and
    # does not report, minutes later, that no rank ever came.
    loom.Comm.init_rank(1, uid, 0).destroy()
    with pytest.raises(ValueError):
        loom.Comm.init_rank(1, b"short", 0)


def test_dump_flight_writes_every_communicators_record(tmp_path):
    uid = loom.get_unique_id()
    comm = loom.Comm.init_rank(1, uid, 0)
    try:
        loom.dump_flight(str(tmp_path))
        records = list(tmp_path.glob("loom-flight-*-r0.json"))
        assert len(records) == 1, list(tmp_path.iterdir())
        (tmp_path / "one").mkdir()
        comm.dump_flight(str(tmp_path / "one"))
        assert [p.name for p in (tmp_path / "one").iterdir()] == [records[0].name]
        record = json.loads(records[0].read_text())
        assert record["reason"] == "loomCommDumpFlight"
        assert (record["rank"], record["nranks"]) == (0, 1)
        with pytest.raises(loom.LoomError, match="is not a directory"):
            loom.dump_flight(str(tmp_path / "missing"))
    finally:
        comm.destroy()
