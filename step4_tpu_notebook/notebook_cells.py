# %% [markdown]
# # Launching training on TPU cores with 🤗 Accelerate
#
# The last step of the course, as a notebook: fine-tune a BERT-style classifier on GLUE MRPC
# (is sentence 2 a paraphrase of sentence 1?) with the loop of step 3, started by
# `notebook_launcher` on every TPU chip of a Colab or Kaggle TPU runtime, or on 2 processes of
# a laptop's CPU. It follows Accelerate's "simple NLP example" TPU notebook.
#
# The training cells are `step4_tpu_notebook/train.py`'s own cells, copied here by
# `python -m accelerate_course.maintain.build_notebook` (a test fails when they differ).

# %% [markdown]
# ## Setup
#
# The next cell makes this notebook run where you opened it, and says in one `setup:` line
# per decision what it kept and what it installed
# ([docs/notebook-setup.md](../docs/notebook-setup.md) has its answer for each runtime):
# - **in the course's folder** (a laptop, after `make install`, with the `.venv` kernel): it
#   finds everything already there and changes nothing;
# - **on Colab or Kaggle**: it keeps the runtime's torch (on a TPU runtime, a torch and
#   torch_xla of one release; otherwise it installs torch and torch_xla 2.9.0, PyTorch's
#   CPU build of torch, since a TPU machine needs no CUDA), installs the course's versions of
#   the Hugging Face libraries, and the course itself from `COURSE_SOURCE` (the package
#   `common`, with the embedded tiny BERT and data: the notebook runs offline there too). If
#   it upgraded a package this kernel had already loaded, it asks you to restart the runtime
#   and run the notebook again; on a Python it cannot install for, it says so in one line;
# - **with a TPU attached**: it sets `PJRT_DEVICE=TPU`, which, with the Colab or Kaggle
#   environment, is what makes `notebook_launcher` take its TPU branch.
#
# Every setting of the notebook comes from `COURSE_ARGS` (the command line of the course's
# scripts): `--checkpoint bert-base-cased --dataset glue` is the course's real setup, from the
# Hugging Face Hub. Set `QUICK_RUN = True` below to see the whole notebook finish in a few
# minutes.

# %%
import os

# True: 50 optimizer steps instead of 3 epochs, so that the whole notebook finishes in a few
# minutes (its numbers are then those of a barely trained model)
QUICK_RUN = False
if QUICK_RUN:
    os.environ["COURSE_ARGS"] = os.environ.get("COURSE_ARGS", "") + " --max-train-steps 50"

# %%
# setup: written by accelerate_course/maintain/build_notebook.py

# %% [markdown]
# ## The imports
#
# `train.py`'s first cells: its docstring and its imports.

# %%
# train.py: cell 0

# %%
# train.py: cell 1

# %% [markdown]
# ## The settings
#
# The same settings the launch below reads (`main()` calls `parse_args()` too): every cell
# uses them, so what you look at here is what is trained there.

# %%
args = parse_args()
print(args)

# %% [markdown]
# ## Load the data
#
# Three splits, with `sentence1`, `sentence2`, `label` (1 = paraphrase) and `idx`. A few
# random pairs:

# %%
import pandas as pd

raw_datasets = load_splits(args.dataset)
print(raw_datasets)
examples = raw_datasets["train"].shuffle(seed=0).select(range(6))
pd.DataFrame(examples)[["sentence1", "sentence2", "label"]].style.set_properties(
    **{"text-align": "left"})

# %% [markdown]
# ## Preprocess
#
# The tokenizer turns a pair into one sequence, `[CLS] sentence1 [SEP] sentence2 [SEP]`,
# with `token_type_ids` telling the two sentences apart:

# %%
tokenizer = load_tokenizer(resolve_checkpoint(args.checkpoint))
pair = tokenizer(raw_datasets["train"][0]["sentence1"], raw_datasets["train"][0]["sentence2"])
print(tokenizer.decode(pair["input_ids"]))
print(pair)

# %% [markdown]
# `common/data.py` tokenizes every pair, keeps only the columns the model accepts
# (`input_ids`, `token_type_ids`, `attention_mask`, and `labels`, renamed from `label`), and
# wraps the splits in dataloaders. For TPUs every batch is padded to the same length, 128:

# %%
train_dataloader, eval_dataloader = get_dataloaders(
    raw_datasets, tokenizer, args, pad_to_max_length=128)
batch = next(iter(train_dataloader))
print({name: tuple(tensor.shape) for name, tensor in batch.items()})

# %% [markdown]
# ## A first look at the model, on the CPU
#
# The pretrained encoder with a new, untrained two-class head. This cell runs it on the CPU:
# the model and the batch are CPU tensors, and nothing here touches a TPU, so the launch
# below can still start its processes there (see "The TPU rules" below).

# %%
set_seed(args.seed)
untrained = AutoModelForSequenceClassification.from_pretrained(
    resolve_checkpoint(args.checkpoint), num_labels=2)
outputs = untrained(**batch)
print(outputs.loss, outputs.logits.shape)

# %% [markdown]
# ## The metric
#
# GLUE MRPC reports accuracy and F1 (of the paraphrase class). With its untrained head the
# model guesses; the training below should do much better than this, and better than always
# answering "paraphrase". On the CPU too:

# %%
metric = evaluate.load(GLUE_MRPC_METRIC)
untrained.eval()
with torch.no_grad():
    for batch in eval_dataloader:
        predictions = untrained(**batch).logits.argmax(dim=-1)
        metric.add_batch(predictions=predictions, references=batch["labels"])
print("untrained head:", metric.compute())
labels = raw_datasets["validation"]["label"]
print("always 'paraphrase':", metric.compute(predictions=[1] * len(labels), references=labels))

# %% [markdown]
# ## The TPU rules, and the training function
#
# Everything from the `Accelerator` to the final metric lives in one function, because
# `notebook_launcher` runs a *function* in every process (one per TPU chip; on TPU v2 and
# v3, whose chips have two cores, one thread per core inside it):
#
# - **On a TPU, each core takes its own copy of the model and seeds its own generator.** On
#   TPU v2 and v3 the threads of one process all receive the one model object, and
#   `prepare()` moves the model it is given to its core in place: without a copy, one core
#   would train the weights another core moved (accelerate issue #3126). Dropout on the TPU
#   draws from the core's random generator, which `set_seed` in `main()` cannot reach before
#   the launch: the function seeds it from `--seed`.
#
# - **The `Accelerator` is created inside it.** Each process sets up its own. If the
#   notebook has already created one, `notebook_launcher` refuses to launch ("the
#   `Accelerator` should only be initialized inside your training function"): restart the
#   runtime.
# - **The model is created outside it**, once, in `main()`, and passed in: it is loaded (or
#   downloaded) once, its new head gets its random weights from one seed, and every process
#   starts from that copy. Keep it on the CPU until the launch: torch_xla refuses to start
#   its processes once this notebook has used the TPU ("Runtime is already initialized. Do
#   not use the XLA device before calling xmp.spawn."), which is why the cells above run on
#   the CPU.
# - **Every batch has the same shape.** XLA compiles the computation for the shapes it sees;
#   dynamic padding gives a new sequence length almost every batch, and each new length
#   costs a new compilation. Padding every pair to 128 tokens compiles once.
# - **No `.item()` at every step.** Reading a value from the TPU makes the host wait for it;
#   the losses stay on the device and are read once, after training.
#
# With no GPU or TPU, `Accelerator(cpu=True)` makes the launched processes one group on the
# CPU; without it, each would train alone on all the data.

# %%
# train.py: cell 2

# %% [markdown]
# ## The launch
#
# `main()` reads the settings, creates the model once, and calls
# `notebook_launcher(training_function, (model, args), num_processes=args.num_processes)`.
# What it prints tells you where it runs:
# - on a Colab or Kaggle TPU: **`Launching a training on TPU cores.`**, then
#   `Distributed environment: DistributedType.XLA`, one process per TPU chip (`num_processes`
#   is ignored there). If you see anything else, the TPU branch was not taken: check that
#   the setup cell found the TPU (`PJRT_DEVICE=TPU`);
# - on a CPU (a laptop, this copy): `Launching training on 2 CUDAs.` (Accelerate names CUDA
#   for any machine without another accelerator), then `MULTI_CPU  Backend: gloo`, `Num
#   processes: 2`;
# - on Colab without a TPU, with a CPU or one GPU: `Launching training on one CPU.` or `on
#   one GPU.`, and the function runs once, in this notebook's process;
# - on Kaggle with one GPU: first `note: 2 processes asked for and 1 GPU here ...`, then the 2
#   processes on the CPU (gloo): two processes cannot share one GPU. `COURSE_ARGS=
#   "--num-processes 1"` trains in one process on the GPU instead;
# - on Kaggle with two GPUs (T4 x2): `DistributedType.MULTI_GPU`, one process per GPU (nccl).
#
# (The GPU lines are read in Accelerate's sources and simulated, not yet run on a GPU.)

# %%
# train.py: cell 3

# %% [markdown]
# ## The results
#
# The launch wrote them to `<output-dir>/metrics.json`: accuracy, F1, every prediction and
# every training loss. On a laptop's CPU, 2 processes each take half of every epoch's
# batches, so training takes 690 optimizer steps of 2 × 8 pairs.

# %%
import json
from pathlib import Path

results = json.loads((Path(args.output_dir) / "metrics.json").read_text())
print({key: results[key] for key in ("accuracy", "f1", "eval_samples", "num_processes")})
print(f"{len(results['train_losses'])} optimizer steps, training loss "
      f"{results['train_losses'][0]:.3f} -> {results['train_losses'][-1]:.3f}")
