"""How long DeepSpeed's pipeline TrainSchedule takes against 1F1B's (m + p - 1)(F + B).

    python benchmarks/bench_deepspeed_schedule.py

Each stage runs its instructions in the order DeepSpeed's ``TrainSchedule.steps()`` issues them
(``deepspeed/runtime/pipe/schedule.py``, v0.16.4): per step, the send of the previous
micro-batch's output or input gradient, the receive of this one's, then its forward or
backward; sends block until the neighbour's matching receive (NCCL point-to-point), and a
transfer takes ``send`` (in units of one forward; a backward takes two). Prints the ratio to
the 1F1B time with the two transfers per micro-batch and stage boundary that 1F1B also makes
(docs/decisions/0003-checkpoint-host-calls.md).
"""

from __future__ import annotations

Instruction = tuple[str, int]  # kind, micro-batch


def stage_program(stage: int, stages: int, micro_batches: int) -> list[Instruction]:
    """One stage's instructions in DeepSpeed's order (``TrainSchedule.steps``)."""

    def valid(batch: int) -> bool:
        return 0 <= batch < micro_batches

    program: list[Instruction] = []
    previous = -1
    for step in range(2 * (micro_batches + stages - 1)):
        forward = step % 2 == stage % 2
        if forward:
            batch = step // 2 - stage // 2
        elif step % 2 == 0:
            batch = step // 2 - stages + (stage + 1) // 2
        else:
            batch = (step - 1) // 2 - stages + 1 + stage // 2
        if forward:
            if valid(previous) and stage > 0:
                program.append(("send_grad", previous))
            if valid(batch) and stage > 0:
                program.append(("recv_act", batch))
        else:
            if valid(batch) and stage < stages - 1:
                program.append(("recv_grad", batch))
            if valid(previous) and stage < stages - 1:
                program.append(("send_act", previous))
        if valid(batch):
            program.append(("forward" if forward else "backward", batch))
        previous = batch
    return program


_PEER = {"send_act": ("recv_act", 1), "recv_act": ("send_act", -1)}
_PEER |= {"send_grad": ("recv_grad", -1), "recv_grad": ("send_grad", 1)}


def makespan(stages: int, micro_batches: int, send: float) -> float:
    """Time until the last stage finishes, forward 1 and backward 2 per micro-batch."""
    programs = [stage_program(s, stages, micro_batches) for s in range(stages)]
    done, clock = [0] * stages, [0.0] * stages
    while any(done[s] < len(programs[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            while done[s] < len(programs[s]):
                kind, batch = programs[s][done[s]]
                if kind in ("forward", "backward"):
                    clock[s] += 1.0 if kind == "forward" else 2.0
                    done[s] += 1
                    moved = True
                    continue
                partner, offset = _PEER[kind]
                peer = s + offset
                if done[peer] >= len(programs[peer]) or programs[peer][done[peer]] != (
                    partner,
                    batch,
                ):
                    break
                clock[s] = clock[peer] = max(clock[s], clock[peer]) + send
                done[s] += 1
                done[peer] += 1
                moved = True
        if not moved:
            raise RuntimeError(f"deadlock at p={stages}, m={micro_batches}")
    return max(clock)


def main() -> None:
    print("| send | stages | micro-batches | DeepSpeed / 1F1B |")
    print("|---|---|---|---|")
    for send in (0.0, 0.05, 0.2):
        for stages, micro_batches in (
            (2, 2),
            (2, 4),
            (4, 2),
            (4, 4),
            (4, 8),
            (4, 16),
            (8, 8),
            (8, 32),
        ):
            one_f_one_b = (micro_batches + stages - 1) * (3.0 + 2 * send)
            ratio = makespan(stages, micro_batches, send) / one_f_one_b
            print(f"| {send} | {stages} | {micro_batches} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
