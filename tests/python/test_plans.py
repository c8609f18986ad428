"""loom.plan: the DSL's checker and fusion passes without ranks, then plans registered and run by
ranks as processes (plans_worker.py) against numpy."""
import json
import os

import pytest

import loom
import ranks
from loom import plan
from loom.plan import PlanError, examples

WORKER = os.path.join(os.path.dirname(__file__), "plans_worker.py")


@pytest.mark.parametrize("nranks", range(1, 9))
def test_every_example_checks_fused_and_unfused(nranks):
    for name, program in examples.all_examples(nranks).items():
        unfused = json.loads(plan.compile(program, fuse=False))
        fused = json.loads(plan.compile(program))
        assert unfused["nranks"] == fused["nranks"] == nranks
        ops = lambda p: sum(len(r["ops"]) for r in p["ranks"])  # noqa: E731
        assert ops(fused) <= ops(unfused), name


def test_fusion_removes_passes_and_each_pass_has_a_switch():
    ring = examples.ring_allreduce(4)
    kinds = lambda text: [op["op"] for op in json.loads(text)["ranks"][0]["ops"]]  # noqa: E731
    assert "reduce" in kinds(plan.compile(ring, fuse=False))
    assert "reduce" not in kinds(plan.compile(ring))  # recv + reduce -> recv_reduce
    assert kinds(plan.compile(ring, fuse=["recv_copy"])) == kinds(plan.compile(ring, fuse=False))
    with pytest.raises(ValueError, match="unknown fusion pass"):
        plan.compile(ring, fuse=["warp_drive"])


def test_final_marks_the_reduction_that_completes_a_chunk():
    text = plan.compile(examples.ring_allreduce(3))
    finals = [op for op in json.loads(text)["ranks"][0]["ops"] if op.get("final")]
    assert len(finals) == 1 and finals[0]["dst"][0] == "output"


def _two_ranks(build0, build1, scratch=1):
    p = plan.Program("t", "allreduce", 2, scratch_chunks=scratch)
    build0(p, p.rank(0))
    build1(p, p.rank(1))
    return p


def _good(p, rank):
    other = 1 - rank.rank
    rank.send(other, p.input[0])
    rank.recv_reduce(other, p.output[0], p.input[0])


def test_checker_explains_a_missing_send():
    def lonely(p, rank):
        rank.recv_reduce(1, p.output[0], p.input[0])
    with pytest.raises(PlanError, match=r"never finishes(.|\n)*rank 1, lane 'recv from 0'"):
        plan.check(_two_ranks(lonely, _good))


def test_checker_explains_a_cycle_of_waits():
    def waits(p, rank):
        other = 1 - rank.rank
        rank.recv(other, p.scratch[0])
        rank.send(other, p.scratch[0])
        rank.reduce(p.output[0], [p.input[0], p.scratch[0]])
    with pytest.raises(PlanError, match=r"never finishes(.|\n)*waits for op 0"):
        plan.check(_two_ranks(waits, waits))


def test_checker_explains_a_chunk_written_twice():
    def twice(p, rank):
        _good(p, rank)
        rank.copy(p.output[0], p.input[0])
    with pytest.raises(PlanError, match=r"rank 0 writes output\[0\] 2 times"):
        plan.check(_two_ranks(twice, _good))


def test_checker_explains_a_chunk_read_before_it_is_written():
    def early(p, rank):
        rank.send(1, p.scratch[0])
        rank.recv_reduce(1, p.output[0], p.input[0])
    with pytest.raises(PlanError, match=r"rank 0, lane 'send to 1' step 0.*reads scratch\[0\] "
                                        r"before anything writes it"):
        plan.check(_two_ranks(early, _good))


def test_checker_explains_wrong_contributions_and_sizes():
    def own_only(p, rank):
        rank.send(1, p.input[0])
        rank.recv(1, p.scratch[0])
        rank.copy(p.output[0], p.input[0])
    with pytest.raises(PlanError, match=r"rank 0 output\[0\] holds \{rank 0 input\[0\]\} but "
                                        r"must hold"):
        plan.check(_two_ranks(own_only, _good))
    p = plan.Program("sizes", "allgather", 2, chunks_per_block=2)
    for r in range(2):
        rank = p.rank(r)
        rank.copy(p.output[2 * r:2 * r + 2], p.input[0:2])
        rank.send(1 - r, p.input[0])
        rank.recv(1 - r, p.output[2 * (1 - r) + 1])
    with pytest.raises(PlanError, match="chunks of other sizes"):
        plan.check(p)
    # recv_reduce's own operand too (Loom's loader refuses it: its chunks differ in size).
    q = plan.Program("with", "allreduce", 2, chunks_per_block=2)
    for r in range(2):
        rank = q.rank(r)
        for c in range(2):
            rank.send(1 - r, q.input[c])
            rank.recv_reduce(1 - r, q.output[c], q.input[1 - c])
    with pytest.raises(PlanError, match=r"input\[1\] and output\[0\] are chunks of different sizes"):
        plan.check(q)


def test_dsl_refuses_bad_references():
    p = plan.Program("x", "allgather", 2, chunks_per_block=2)
    with pytest.raises(PlanError, match="crosses a block boundary"):
        p.output[1:3]
    with pytest.raises(PlanError, match="not another rank"):
        p.rank(0).send(0, p.input[0])
    with pytest.raises(PlanError, match="read-only"):
        p.rank(0).copy(p.input[0], p.output[0])
    with pytest.raises(PlanError, match="power-of-two"):
        examples.recursive_doubling_allreduce(3)


def test_compile_caches_by_program_and_options(tmp_path):
    ring = examples.ring_allreduce(2)
    text = plan.compile(ring, cache_dir=str(tmp_path))
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].read_text() == text
    assert plan.compile(ring, cache_dir=str(tmp_path)) is text
    plan.compile(ring, fuse=False, cache_dir=str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 2


def run_ranks(case, nranks, *rest, timeout=300):
    return ranks.run_ranks(WORKER, case, nranks, [loom.get_unique_id().hex(), *rest], timeout)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("fused", ["fused", "unfused"])
def test_examples_run_bit_exact(nranks, fused):
    codes, outputs = run_ranks("examples", nranks, fused)
    assert codes == [0] * nranks, outputs


def test_different_plans_fail_on_every_rank():
    codes, outputs = run_ranks("different", 2)
    assert codes == [0, 0], outputs


def test_python_selector_chooses_per_call():
    codes, outputs = run_ranks("selector", 2)
    assert codes == [0, 0], outputs
