"""The XLA lane: step 4 on torch_xla's CPU backend, through notebook_launcher's TPU branch.

Run with `make xla-lane` (accelerate_course/maintain/xla_lane.sh), which builds .venv-xla with
torch 2.9.0 and torch_xla 2.9.0. In the course's own environment (torch 2.13.0, no torch_xla)
these tests skip. Training runs on one XLA device: two devices in the threads of one process
never complete a collective on the CPU backend
(test_two_threads_cannot_all_reduce_on_the_cpu_backend).
The last tests evaluate behind torch_xla's read-ahead loader (tests/helpers/xla_gather.py):
gather_for_metrics against the course's gather and cut by total_dataset_length.
"""

import json
import sys

import pytest
from conftest import REPO, assert_ok, read_metrics, run_command

pytestmark = pytest.mark.xla
pytest.importorskip(
    "torch_xla",
    reason="torch_xla is not installed here; the XLA lane runs "
    "in its own environment: make xla-lane",
)

XLA_RUN = REPO / "tests" / "helpers" / "xla_run.py"
# notebook_launcher takes its TPU branch only in Colab or Kaggle with TPU_NAME set: look like
# a Kaggle kernel; PJRT_DEVICE=CPU gives one XLA device on the CPU; off a real TPU,
# Accelerate reads the local rank from LOCAL_RANK (without it nothing is printed)
TPU_BRANCH = dict(
    PJRT_DEVICE="CPU",
    KAGGLE_KERNEL_RUN_TYPE="Interactive",
    TPU_NAME="cpu",
    LOCAL_RANK="0",
    ACCELERATE_USE_CPU="0",
)
SHORT = ["--max-train-steps", "16", "--eval-batch-size", "32"]


def xla_run(tmp_path, name, *flags):
    out = tmp_path / name
    result = run_command(
        [
            sys.executable,
            XLA_RUN,
            out / "report.json",
            "--output-dir",
            out,
            "--num-processes",
            "1",
            *SHORT,
            *[str(f) for f in flags],
        ],
        **TPU_BRANCH,
    )
    assert_ok(result)
    assert "Launching a training on TPU cores." in result.stdout
    return json.loads((out / "report.json").read_text()), read_metrics(out), result


@pytest.fixture(scope="module")
def fixed(tmp_path_factory, checkpoint_without_dropout):
    return xla_run(
        tmp_path_factory.mktemp("fixed"), "run", "--checkpoint", checkpoint_without_dropout
    )


@pytest.mark.runs
def test_step4_trains_on_an_xla_device_through_the_tpu_branch(fixed):
    report, metrics, result = fixed
    assert report["distributed_type"] == "DistributedType.XLA"
    assert report["device"] == "xla:0" and report["num_processes"] == 1
    assert "gathered 408 predictions, kept 408" in result.stdout
    assert metrics["eval_samples"] == 408 and len(metrics["train_losses"]) == 16


@pytest.mark.runs
def test_fixed_shapes_stop_compiling_after_the_first_steps(
    fixed, tmp_path, checkpoint_without_dropout
):
    fixed_counts = fixed[0]["compiles_after_each_step"]
    dynamic = xla_run(
        tmp_path, "dynamic", "--checkpoint", checkpoint_without_dropout, "--dynamic-padding"
    )[0]
    dynamic_counts = dynamic["compiles_after_each_step"]
    print(
        f"\nXLA compilations after each of 16 optimizer steps:\n"
        f"  fixed padding (128):  {fixed_counts}  (end of run: {fixed[0]['compiles_at_the_end']})\n"
        f"  dynamic padding:      {dynamic_counts}  (end of run: {dynamic['compiles_at_the_end']})"
    )
    # fixed shapes: the graphs of the first steps (the step before and after the optimizer's
    # state appears) are reused for every later step
    assert fixed_counts[4] == fixed_counts[-1]
    # dynamic padding: new lengths keep arriving, and each one compiles new graphs
    assert dynamic_counts[-1] > dynamic_counts[4] > fixed_counts[4]
    assert dynamic["compiles_at_the_end"] > 2 * fixed[0]["compiles_at_the_end"]


@pytest.mark.runs
def test_loss_item_at_every_step_compiles_one_more_graph(
    fixed, tmp_path, checkpoint_without_dropout
):
    # the what-if variant loss_item_every_step: step 3's train_losses.append(loss.item())
    # instead of keeping the losses on the device; .item() executes the graph up to the loss
    # at every step, a graph of its own, and waits for it
    fixed_counts = fixed[0]["compiles_after_each_step"]
    item = xla_run(
        tmp_path,
        "item",
        "--checkpoint",
        checkpoint_without_dropout,
        "--variant",
        "loss_item_every_step",
    )[0]
    item_counts = item["compiles_after_each_step"]
    print(
        f"\nXLA compilations after each of 16 optimizer steps:\n"
        f"  losses kept on the device (step 4): {fixed_counts}\n"
        f"  loss.item() at every step:          {item_counts}"
    )
    assert item_counts[4] == item_counts[-1]  # still fixed shapes: no new graphs later
    assert item_counts[-1] > fixed_counts[-1]


@pytest.mark.runs
def test_a_full_run_on_xla_learns_like_the_same_run_on_plain_cpu(tmp_path):
    # the default run (3 epochs, 1,377 steps), once on the XLA device through the TPU branch
    # and once on the plain CPU (Accelerate ignores torch_xla with USE_TORCH_XLA=0)
    out_xla, out_cpu = tmp_path / "xla", tmp_path / "cpu"
    result = run_command(
        [
            sys.executable,
            REPO / "step4_tpu_notebook" / "train.py",
            "--output-dir",
            out_xla,
            "--num-processes",
            "1",
        ],
        **TPU_BRANCH,
    )
    assert_ok(result)
    assert "Launching a training on TPU cores." in result.stdout
    assert_ok(
        run_command(
            [
                sys.executable,
                REPO / "step4_tpu_notebook" / "train.py",
                "--output-dir",
                out_cpu,
                "--num-processes",
                "1",
            ],
            USE_TORCH_XLA="0",
        )
    )
    on_xla, on_cpu = read_metrics(out_xla), read_metrics(out_cpu)
    print(
        f"\nfull run: XLA accuracy {on_xla['accuracy']:.4f} f1 {on_xla['f1']:.4f} "
        f"({on_xla['train_seconds']:.0f} s); CPU accuracy {on_cpu['accuracy']:.4f} "
        f"f1 {on_cpu['f1']:.4f} ({on_cpu['train_seconds']:.0f} s)"
    )
    # Not the same run: on XLA, Accelerate gives the shuffled loader its own generator,
    # seeded from one draw of the random state, while on the CPU the loader draws from the
    # global generator; so the two see the training pairs in different orders, and XLA's
    # dropout draws from its own generator too. They are two runs of the same training, which
    # differ like two seeds; the course runner allows 0.05 between such runs, and so does
    # this test. Both must learn.
    assert on_xla["accuracy"] >= 0.80 and on_cpu["accuracy"] >= 0.80
    assert abs(on_xla["accuracy"] - on_cpu["accuracy"]) <= 0.05
    assert abs(on_xla["f1"] - on_cpu["f1"]) <= 0.05


def test_torch_xla_counts_the_same_chips(tmp_path, monkeypatch):
    # in the XLA lane: torch_xla's own count over the same fake trees
    import glob

    import torch_xla._internal.tpu as tpu
    from test_tpu_detection import GVNIC, fake_pci

    from common.tpu import tpu_chips

    real_glob = glob.glob  # the fake trees' files, listed before torch_xla's glob is patched
    for name, devices, chips in [
        ("v3", [("0x1ae0", "0x0027")] * 4, 4),
        ("gvnic", [GVNIC], 0),
        ("v5e", [GVNIC] + [("0x1ae0", "0x0063")] * 8, 8),
    ]:
        root = fake_pci(tmp_path / name, *devices)
        paths = sorted(real_glob(f"{root}/*/vendor"))
        monkeypatch.setattr(tpu.glob, "glob", lambda pattern, paths=paths: paths)
        assert tpu.num_available_chips() == len(tpu_chips(root)) == chips, name
    # Kaggle's v5e-8: xmp.spawn starts one process per chip (no process bounds set)
    monkeypatch.delenv("TPU_PROCESS_BOUNDS", raising=False)
    assert tpu.num_local_processes() == 8


@pytest.mark.runs
def test_two_threads_of_one_process_each_prepare_their_own_model(tmp_path):
    # TPU v2 and v3: a process per chip and a thread per core (torch_xla's PJRT,
    # _run_thread_per_device); here one process with CPU_NUM_DEVICES=2 runs two threads, one
    # per XLA device, both handed the one model created before the launch
    helper = REPO / "tests" / "helpers" / "xla_threads.py"
    seen = {}
    for way in ("shared", "copy", "step4"):
        report = tmp_path / f"{way}.json"
        result = run_command(
            [sys.executable, helper, report, way], PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2"
        )
        assert_ok(result)
        seen[way] = json.loads(report.read_text())
        print(
            f"\n{way}: "
            + "; ".join(
                f"{t['thread']} on {t['device']}: model object "
                f"{t['model_object']}, weights on {t['weights_on']}"
                for t in seen[way]
            )
        )
    shared, copied, step4 = seen["shared"], seen["copy"], seen["step4"]
    assert sorted(thread["device"] for thread in shared) == ["xla:0", "xla:1"]
    # without a copy: one model object for both threads, on whichever device moved it last,
    # so one thread would train on the other's device
    assert shared[0]["model_object"] == shared[1]["model_object"]
    assert any(thread["weights_on"] != thread["device"] for thread in shared)
    # a copy per thread (copy.deepcopy): each thread its own model, on its own device
    for threads in (copied, step4):
        assert threads[0]["model_object"] != threads[1]["model_object"]
        assert all(thread["weights_on"] == thread["device"] for thread in threads)
    # step 4's own training_function, up to its scheduler: each thread's optimizer holds the
    # parameters of a model of its own, on its own device, starting from the same weights
    assert sorted(thread["device"] for thread in step4) == ["xla:0", "xla:1"]
    assert step4[0]["weights_sum"] == step4[1]["weights_sum"]


@pytest.mark.runs
def test_two_threads_cannot_all_reduce_on_the_cpu_backend(tmp_path):
    # why the lane trains on one device: on torch_xla's CPU backend, the first collective
    # between the two threads of one process never completes (each thread compiles its own
    # all-reduce, and XLA's rendezvous keys them apart); XLA aborts the process after 10 s
    script = tmp_path / "all_reduce.py"
    script.write_text(
        "import torch, torch_xla, torch_xla.core.xla_model as xm\n"
        "from torch_xla._internal import pjrt\n"
        "def add_ones():\n"
        "    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=torch_xla.device()))\n"
        "    return total.cpu().tolist()\n"
        "if __name__ == '__main__':\n"
        "    print(pjrt.run_multiprocess(add_ones, start_method='fork'))\n"
    )
    result = run_command(
        [sys.executable, script], PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2", timeout=120
    )
    assert result.returncode != 0
    assert "Expected 2 threads to join the rendezvous, but only 1 of them arrived" in result.stderr


@pytest.mark.runs
def test_step4_seeds_the_dropout_of_each_xla_device(tmp_path):
    # dropout on an XLA device draws from that device's generator, which main()'s set_seed
    # (transformers': Python, NumPy, torch's CPU and CUDA) does not reach: step 4 seeds it in
    # the launched function from --seed. The same model (its head made with seed 42) trained
    # with the dropout seeded 42 and 43: different losses from the first step on, and the same
    # losses again for the same seed
    runs = {}
    for name, seed in (("a", 42), ("b", 42), ("c", 43)):
        runs[name] = xla_run(tmp_path, name, "--max-train-steps", "4", "--dropout-seed", seed)[1][
            "train_losses"
        ]
    print(f"\nlosses, dropout seeded 42: {runs['a']}\n            seeded 43: {runs['c']}")
    assert runs["a"] == runs["b"]
    assert runs["a"][0] != runs["c"][0]


@pytest.mark.runs
def test_on_one_device_the_epochs_last_short_batch_compiles_once_more(tmp_path):
    # 3,668 training pairs in batches of 8 leave a last batch of 4 in each epoch: on one XLA
    # device (a Colab TPU v5e-1) it is a second shape, compiled once; docs/xla-lane.md and the
    # notebook quote these counts
    report = xla_run(tmp_path, "epoch", "--epochs", "1", "--max-train-steps", "459")[0]
    counts = report["compiles_after_each_step"]
    changes = [
        (step, count)
        for step, count in enumerate(counts, start=1)
        if step == 1 or count != counts[step - 2]
    ]
    print(
        f"\none epoch on one XLA device: graphs compiled by optimizer step {changes}; "
        f"{report['compiles_at_the_end']} with the evaluation"
    )
    assert len(counts) == 459
    assert counts[2] == counts[-2] - 1 or counts[2] == counts[-2]  # no new shape in between
    assert counts[-1] == counts[-2] + 1  # the last batch, of 4 pairs: one more graph


# ---- gather_for_metrics behind torch_xla's read-ahead loader (tests/helpers/xla_gather.py) ----
# On XLA, prepare() returns an MpDeviceLoaderWrapper: a loader thread iterates Accelerate's
# DataLoaderShard ahead of the loop, and sets the end flag that gather_for_metrics reads. The
# helper evaluates 408 indexed rows (MRPC validation's size), pausing 0.02 s per batch as the
# loop waits for a device's step. Figures: (rows, distinct, lost, duplicated) per batch size.
XLA_GATHER = REPO / "tests" / "helpers" / "xla_gather.py"
GATHER_BATCH_SIZES = [8, 32, 5, 24, 10]
# one XLA device (run here): right, except at batch size 10 (41 batches), where the loader
# thread holds the last batch, flag set, while the loop gathers batches 7 to 14 (8 batches of
# 10 cut to the remainder, 8)
ONE_DEVICE = {
    8: (408, 408, 0, 0),
    32: (408, 408, 0, 0),
    5: (408, 408, 0, 0),
    24: (408, 408, 0, 0),
    10: (392, 392, 16, 0),
}
# rank 0 of 2 (simulated): the padded tail is kept whenever 408 is not a multiple of twice the
# batch size, and at batch size 5 (41 batches per device) 8 batches are cut as well
RANK0_OF_2 = {
    8: (416, 408, 0, 8),
    32: (448, 408, 0, 40),
    5: (394, 392, 16, 2),
    24: (432, 408, 0, 24),
    10: (420, 408, 0, 12),
}
# the course's way: rows gathered before the cut by total_dataset_length (408)
GATHERED = {
    "run": dict.fromkeys(GATHER_BATCH_SIZES, 408),
    "simulated": {8: 416, 32: 448, 5: 410, 24: 432, 10: 420},
}


def gather_run(report, *flags):
    result = run_command(
        [
            sys.executable,
            XLA_GATHER,
            report,
            "--batch-sizes",
            *map(str, GATHER_BATCH_SIZES),
            *flags,
        ],
        PJRT_DEVICE="CPU",
    )
    assert_ok(result)
    print("\n" + result.stdout)
    return json.loads(report.read_text())


def figures(result):
    kept = result["gather_for_metrics"]
    return kept["rows"], kept["distinct"], len(kept["lost"]), len(kept["duplicated"])


def results_of(report, setting):
    return [result for result in report["results"] if result["setting"] == setting]


@pytest.fixture(scope="module")
def gathered_behind_the_xla_loader(tmp_path_factory):
    # every setting and batch size twice, to see that the figures repeat
    return gather_run(tmp_path_factory.mktemp("gather") / "gather.json", "--repeats", "2")


@pytest.mark.runs
def test_gather_for_metrics_behind_the_xla_loader_on_one_device(gathered_behind_the_xla_loader):
    report = gathered_behind_the_xla_loader
    assert report["distributed_type"] == "DistributedType.XLA" and report["num_processes"] == 1
    assert report["loader"] == "accelerate.data_loader.MpDeviceLoaderWrapper"
    runs = results_of(report, "run")
    assert len(runs) == 2 * len(GATHER_BATCH_SIZES)
    for result in runs:
        assert figures(result) == ONE_DEVICE[result["batch_size"]], result["batch_size"]
        # the loader thread has always run end() before the loop gathers the last batch
        assert not result["batches"][-1]["after"]["shard_active"]
    at_10 = [result for result in runs if result["batch_size"] == 10]
    for result in at_10:
        assert result["batches_per_device"] == 41
        assert result["batches_cut"] == list(range(7, 15))
        # two rows of each of those batches lost: 78, 79, 88, 89, ..., 148, 149
        assert result["gather_for_metrics"]["lost"] == [
            row for start in range(70, 150, 10) for row in (start + 8, start + 9)
        ]


@pytest.mark.runs
def test_gather_for_metrics_behind_the_xla_loader_as_rank_0_of_2_simulated(
    gathered_behind_the_xla_loader,
):
    simulated = results_of(gathered_behind_the_xla_loader, "simulated")
    assert len(simulated) == 2 * len(GATHER_BATCH_SIZES)
    for result in simulated:
        assert figures(result) == RANK0_OF_2[result["batch_size"]], result["batch_size"]
        assert not result["batches"][-1]["after"]["shard_active"]
        # the duplicates are the rows from the start of the split that padded the last batch
        duplicated = result["gather_for_metrics"]["duplicated"]
        assert duplicated == list(range(len(duplicated)))
    at_5 = [result for result in simulated if result["batch_size"] == 5]
    assert all(result["batches_cut"] == list(range(7, 15)) for result in at_5)


@pytest.mark.runs
def test_the_course_cut_keeps_each_pair_once_behind_the_xla_loader(gathered_behind_the_xla_loader):
    for result in gathered_behind_the_xla_loader["results"]:
        cut = result["course_cut"]
        assert result["total_dataset_length"] == 408
        assert cut["gathered"] == GATHERED[result["setting"]][result["batch_size"]]
        assert (cut["rows"], cut["distinct"], cut["lost"], cut["duplicated"]) == (408, 408, [], [])


@pytest.mark.runs
def test_without_the_pause_only_the_course_cut_stays_exact(tmp_path):
    # the loop no longer waits for a device's step, so it races the loader threads: what
    # gather_for_metrics returns varies from run to run; the cut reads no state and does not
    report = gather_run(tmp_path / "gather.json", "--repeats", "5", "--pause", "0")
    spread = {}
    for result in report["results"]:
        cut = result["course_cut"]
        assert (cut["rows"], cut["distinct"]) == (408, 408), (
            result["setting"],
            result["batch_size"],
        )
        spread.setdefault((result["setting"], result["batch_size"]), set()).add(figures(result))
    print(
        "gather_for_metrics without the pause (rows, distinct, lost, duplicated):\n"
        + "\n".join(
            f"  {setting} {batch_size}: {sorted(seen)}"
            for (setting, batch_size), seen in spread.items()
        )
    )
    # at rank 0 of 2, where 408 is not a multiple of the gathered batch, the padded tail is
    # kept in every run, whatever else the race cuts (once seen: 408 rows, 400 distinct)
    for batch_size in (8, 32, 24, 10):
        assert all(duplicated > 0 for *_, duplicated in spread[("simulated", batch_size)])


@pytest.mark.runs
def test_step4_saves_on_xla_a_model_that_reloads_to_the_runs_predictions(tmp_path):
    step4 = REPO / "step4_tpu_notebook" / "train.py"
    out = tmp_path / "xla"
    assert_ok(
        run_command(
            [sys.executable, step4, "--output-dir", out, "--num-processes", "1", *SHORT],
            **TPU_BRANCH,
        )
    )
    from accelerate_course.reloading import compare_reloaded

    # reloaded on the plain CPU, in a fresh process, batched as the run was (128 tokens)
    assert compare_reloaded({out: 128}) == {out: "408 / 408 equal"}
    # step 3's line, which saves the weights where they are: safetensors cannot read a tensor
    # held on an XLA device, so the run stops at the save and no model is written
    step3_line = tmp_path / "step3_line.py"
    step3_line.write_text(
        step4.read_text().replace('.to("cpu").save_pretrained(', ".save_pretrained(")
    )
    failed = run_command(
        [
            sys.executable,
            step3_line,
            "--output-dir",
            tmp_path / "step3_line",
            "--num-processes",
            "1",
            *SHORT,
        ],
        **TPU_BRANCH,
    )
    assert failed.returncode != 0
    assert "Attempted to access the data pointer on an invalid python storage" in failed.stderr
    assert not (tmp_path / "step3_line" / "model").exists()
