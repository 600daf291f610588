"""Run a step's train.py unchanged, and report from inside every process that trains.

    python spy_run.py REPORT_DIR STEP_SCRIPT [step flags...]
    (step 3: under accelerate launch; step 4: on its own, notebook_launcher starts the rest)

The script's own main() runs, with its training_function wrapped: after the real
training_function returns, in each process that ran it, the wrapper writes
REPORT_DIR/rank<i>.json with what that process's Accelerate state says (process index,
number of processes, distributed type, backend). The main process then evaluates the
final weights once more on its own, with a plain (unprepared, unsharded) dataloader over
the whole validation split, and writes the predictions to
REPORT_DIR/single_process_eval.json: the reference the distributed evaluation must equal.

The model is reached through a spy on AutoModelForSequenceClassification.from_pretrained,
which keeps a reference to the model the step creates and trains.
"""

import json
import runpy
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import AutoModelForSequenceClassification

report_dir, script, step_args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
report_dir.mkdir(parents=True, exist_ok=True)

created = []
original_from_pretrained = AutoModelForSequenceClassification.from_pretrained


def spy_from_pretrained(*args, **kwargs):
    model = original_from_pretrained(*args, **kwargs)
    created.append(model)
    return model


AutoModelForSequenceClassification.from_pretrained = spy_from_pretrained


def report(args):
    state = PartialState()
    (report_dir / f"rank{state.process_index}.json").write_text(json.dumps({
        "process_index": state.process_index,
        "num_processes": state.num_processes,
        "distributed_type": str(state.distributed_type),
        "backend": state.backend,
        "device": str(state.device),
    }))
    if state.is_main_process:
        evaluate_alone(args)
    # every process waits for the main one's extra evaluation, then all leave the group
    # together (without this, the main process aborted at exit, "terminate called without
    # an active exception", once the others had gone)
    state.wait_for_everyone()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def evaluate_alone(args):
    from common.checkpoint import load_tokenizer, resolve_checkpoint
    from common.data import get_dataloaders, load_mrpc

    tokenizer = load_tokenizer(resolve_checkpoint(args.checkpoint))
    _, eval_dataloader = get_dataloaders(load_mrpc(args.dataset), tokenizer,
                                         args.train_batch_size, args.eval_batch_size)
    model = created[-1].eval()
    predictions = []
    with torch.no_grad():
        for batch in eval_dataloader:
            batch = {k: v.to(next(model.parameters()).device) for k, v in batch.items()}
            predictions += model(**batch).logits.argmax(dim=-1).tolist()
    (report_dir / "single_process_eval.json").write_text(json.dumps({"predictions": predictions}))


sys.argv = [script, *step_args]
step = runpy.run_path(script, run_name="spied_step")  # defines main(), does not call it
step_globals = step["main"].__globals__
original_training_function = step_globals["training_function"]


def training_function(*args):
    original_training_function(*args)
    report(args[-1])  # the last argument is the parsed command line in every step


step_globals["training_function"] = training_function
step["main"]()
