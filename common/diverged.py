"""A training that diverged: a loss that turned NaN or infinite, named at the optimizer step
where it appears, with what the run's settings say about why."""

import math
import re

from common.errors import fail


def stop_if_diverged(train_losses: list, args) -> None:
    """End the run with one error line if a loss in train_losses (floats, one per optimizer
    step) is NaN or infinite, naming the first such step and the likely causes; nothing is
    saved. In a launch of several processes each holds its own losses, and the gradients
    they average carry one process's NaN to all of them: so they first agree on the first
    such step (one all_gather_object of a number), and all stop there, none left waiting for the
    others. (On XLA, where Accelerate makes no torch.distributed group, each process looks at
    its own: read in accelerate/state.py.) Returns nothing when every loss is finite."""
    first = next(
        (i for i, loss in enumerate(train_losses) if not math.isfinite(loss)), len(train_losses)
    )
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # (Accelerate makes no group on XLA)
        firsts = [None] * dist.get_world_size()
        dist.all_gather_object(firsts, first)
        first = min(firsts)
    if first < len(train_losses):
        mine = train_losses[first]
        value = f"is {mine}" if not math.isfinite(mine) else "is not a number in another process"
        fail(
            f"the loss of optimizer step {first + 1} {value}: the training diverged, and "
            f"nothing was saved; {likely_causes(args)}"
        )


def non_finite(value, where="metrics") -> str:
    """Return where the first NaN or infinite number in value is ("train_losses[1], the loss
    of optimizer step 2"), or "" when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        step = re.fullmatch(r"train_losses\[(\d+)\]", where)
        return (
            f"{where} ({value}, the loss of optimizer step {int(step[1]) + 1})"
            if step
            else f"{where} ({value})"
        )
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, (list, tuple))
        else ()
    )
    for key, item in items:
        found = non_finite(
            item,
            f"{key}"
            if where == "metrics"
            else f"{where}[{key}]"
            if isinstance(key, int)
            else f"{where}.{key}",
        )
        if found:
            return found
    return ""


def likely_causes(args) -> str:
    """Return what the run's settings say about a training that diverged: a learning rate
    above 1 (5e5 typed for 5e-5), or else where to look. (A float16 or bfloat16 checkpoint,
    the other likely cause, is refused before training: common.checkpoint.)"""
    lr = getattr(args, "lr", None)
    if lr is not None and lr > 1:
        return f"likely: --lr {lr:g} is far above fine-tuning's usual 5e-5"
    return (
        (
            f"look at the learning rate (--lr {lr:g}; fine-tuning's usual is 5e-5) and at the "
            "checkpoint's weights"
        )
        if lr is not None
        else "look at the learning rate"
    )
