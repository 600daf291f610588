"""A finished run is never lost, and a bad input is one line under every launcher.

Real processes throughout: make course's runner, the README's launches (accelerate launch with
the course's config file, step 4's notebook_launcher), torchrun, and disks that are full or
read-only (a tmpfs of this machine, mounted by the test; skipped where mounting is not
allowed). Each case asserts the line a student reads last, the exit code, that no process is
left, and that an earlier run's results are byte for byte as they were.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import psutil
import pytest
from conftest import REPO, STEPS, offline_env, read_metrics, run_command, step_command

from accelerate_course.commands import accelerate_launch

pytestmark = pytest.mark.runs
RUNNER = [sys.executable, "-m", "accelerate_course.run_course"]


def run(command, timeout=600, **env):
    return run_command(command, timeout, **env)


def last_line(result):
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bad_dataset(folder):
    """A dataset folder whose third training pair has the label 2."""
    folder.mkdir(parents=True)
    rows = [
        {"sentence1": "Shares rose.", "sentence2": "Stocks rose.", "label": i % 2} for i in range(6)
    ]
    rows[2]["label"] = 2
    for split in ("train", "validation"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@contextmanager
def tmpfs(folder, options):
    """Mount a tmpfs of this machine at folder (root only); skip the test where it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


# make course ------------------------------------------------------------------------------


def test_a_typo_after_a_finished_run_keeps_its_results(tmp_path):
    out = tmp_path / "course"
    finished = run([*RUNNER, "--steps", "1", "--max-train-steps", "3", "--output-dir", str(out)])
    assert finished.returncode == 0, finished.stdout[-2000:]
    before = sha256(out / "step1" / "metrics.json")
    start = time.monotonic()
    typo = run(
        [
            *RUNNER,
            "--steps",
            "1",
            "--max-train-steps",
            "3",
            "--output-dir",
            str(out),
            "--dataset",
            "my-mrpc-typo",
        ]
    )
    seconds = time.monotonic() - start
    print(
        f"\nmetrics.json before the typo: {before}\n             after the typo:  "
        f"{sha256(out / 'step1' / 'metrics.json')}\nthe typo's run: exit {typo.returncode} "
        f"after {seconds:.1f} s: {last_line(typo)}"
    )
    assert typo.returncode == 1
    assert (typo.stdout + typo.stderr).strip().splitlines() == [
        "error: unknown dataset 'my-mrpc-typo': use 'embedded' (the default), 'embedded-sst2', "
        "'glue' ('glue-mrpc'), 'glue-sst2', or a folder with train and validation files (csv, "
        "json/jsonl or parquet, or GLUE's .tsv)"
    ]  # no plan, no table: the flags come first
    assert sha256(out / "step1" / "metrics.json") == before


def test_a_failed_step_keeps_the_earlier_results_and_its_own_log_apart(tmp_path):
    out = tmp_path / "course"
    assert (
        run(
            [*RUNNER, "--steps", "1", "--max-train-steps", "3", "--output-dir", str(out)]
        ).returncode
        == 0
    )
    before = {p.relative_to(out): sha256(p) for p in (out / "step1").rglob("*") if p.is_file()}
    # a step that fails after it started: a checkpoint whose weights file was cut in half
    # (as a download stopped halfway leaves it) is read inside the step
    from common.checkpoint import EMBEDDED_CHECKPOINT

    half = tmp_path / "half"
    shutil.copytree(EMBEDDED_CHECKPOINT, half)
    weights = (half / "model.safetensors").read_bytes()
    (half / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    failed = run(
        [
            *RUNNER,
            "--steps",
            "1",
            "--max-train-steps",
            "3",
            "--output-dir",
            str(out),
            "--checkpoint",
            str(half),
        ]
    )
    assert failed.returncode == 1
    assert f"see {out / 'step1.failed' / 'train.log'}" in failed.stdout
    assert {
        p.relative_to(out): sha256(p) for p in (out / "step1").rglob("*") if p.is_file()
    } == before
    assert "incomplete metadata" in (out / "step1.failed" / "train.log").read_text()
    assert not (out / "step1.running").exists()


def test_a_second_course_command_in_the_same_folder_refuses_in_one_line(tmp_path):
    out = tmp_path / "course"
    first = subprocess.Popen(
        [*RUNNER, "--steps", "1", "--max-train-steps", "20", "--output-dir", str(out)],
        cwd=REPO,
        env=offline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "step1.running" / "train.log").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    second = run([*RUNNER, "--steps", "1", "--max-train-steps", "3", "--output-dir", str(out)])
    output, _ = first.communicate(timeout=300)
    assert second.returncode == 1
    lines = (second.stdout + second.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: make course (process {first.pid}, started at "
    ), lines
    assert lines[0].endswith(
        f"is writing into {out}; wait for it to end, or pass another "
        'folder: make course ARGS="--output-dir outputs/course2"'
    )
    assert first.returncode == 0, output[-2000:]  # the first finished as if alone
    assert len(read_metrics(out / "step1")["train_losses"]) == 20


def test_a_setting_of_the_environment_that_changes_the_numbers_is_named(tmp_path):
    result = run(
        [
            *RUNNER,
            "--steps",
            "1",
            "2",
            "--max-train-steps",
            "3",
            "--output-dir",
            str(tmp_path / "course"),
        ],
        ACCELERATE_MIXED_PRECISION="bf16",
    )
    assert result.returncode == 1
    row = next(line for line in result.stdout.splitlines() if line.startswith("2 "))
    # bf16's products round otherwise: the losses differ (which other fields do as well
    # depends on the processor's bf16 kernels), and the verdict names the setting
    assert "DIFFERS (" in row and "train_losses" in row, row
    assert ") with ACCELERATE_MIXED_PRECISION=bf16  " in row, row
    # and the weights step 2 saved are not step 1's
    assert row.endswith("408 / 408 equal; OTHER weights as step 1's"), row
    assert (
        "  note: ACCELERATE_MIXED_PRECISION=bf16 is set in this environment: the steps that "
        "make an Accelerator read it (step 1 does not)"
    ) in result.stdout
    assert (
        "ACCELERATE_MIXED_PRECISION=bf16 is set in this environment: the steps that make an "
        "Accelerator read it, step 1 does not" in result.stdout.splitlines()[-1]
    )


# disks ------------------------------------------------------------------------------------


def test_a_full_disk_is_refused_before_anything_trains(tmp_path):
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        (disk / "fill").write_bytes(b"\0" * (1024 * 1024 - 64 * 1024))  # 64 KiB left
        result = run(step_command(1, disk / "out", "--max-train-steps", "3"))
        assert result.returncode == 1
        assert (result.stdout + result.stderr).strip().splitlines() == [
            f"error: --output-dir {disk / 'out'} has 64 KiB free, and a run's results (the "
            "trained model and metrics.json) need up to 3822 KiB; free some space or pass a "
            "folder on another disk"
        ]


def test_results_that_do_not_fit_end_in_one_line_and_keep_the_earlier_ones(tmp_path):
    from argparse import Namespace

    from common.output import write_metrics

    with tmpfs(tmp_path / "disk", "size=256k") as disk:
        (disk / "out").mkdir()
        (disk / "out" / "metrics.json").write_text('{"accuracy": 0.5}\n')
        (disk / "fill").write_bytes(b"\0" * (200 * 1024))
        with pytest.raises(SystemExit) as stop:  # more than the disk has left
            write_metrics(disk / "out", Namespace(seed=42), {"train_losses": [0.5] * 20000})
        assert str(stop.value) == (
            f"error: {disk / 'out' / 'metrics.json'} could not be written (No space left on "
            "device): the run's results are lost, an earlier metrics.json there is as it was; "
            "free some space or pass another --output-dir"
        )
        assert (disk / "out" / "metrics.json").read_text() == '{"accuracy": 0.5}\n'
        assert sorted(p.name for p in (disk / "out").iterdir()) == ["metrics.json"]


def test_a_read_only_folder_is_refused_in_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as folder:
        step = run(step_command(1, folder / "out", "--max-train-steps", "3"))
        course = run([*RUNNER, "--steps", "1", "--output-dir", str(folder / "course")])
    for result, flag in ((step, folder / "out"), (course, folder / "course")):
        assert result.returncode == 1
        assert (result.stdout + result.stderr).strip().splitlines() == [
            f"error: --output-dir {flag} cannot be written (Read-only file system); pass a "
            "folder you can write to, such as outputs/run1"
        ]


def test_a_python_without_the_courses_packages_is_told_in_one_line(tmp_path):
    # another Python than the course's environment (a fresh venv, nothing installed in it), as
    # a student types python3 step1_plain_loop/train.py outside .venv
    import venv

    venv.create(tmp_path / "bare", with_pip=False)
    bare = tmp_path / "bare" / "bin" / "python"
    for step in sorted(STEPS):
        result = subprocess.run(
            [str(bare), str(STEPS[step])],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env=offline_env(),
        )
        assert result.returncode == 1
        assert (result.stdout + result.stderr).strip().splitlines() == [
            "error: No module named 'evaluate': this Python is not the course's environment; "
            "run the course with .venv/bin/python (or after source .venv/bin/activate; if you "
            "did, make install says what is wrong with .venv), or in a notebook its setup cell "
            "first"
        ]


# launchers --------------------------------------------------------------------------------


def test_a_bad_input_under_the_readme_launches_says_the_courses_line_first(tmp_path):
    # step 3 as the README launches it, step 4 as the README runs it: the course's one line,
    # said once (by the main process; every process meets the bad row before any joins the
    # others), then the launcher's own report as the launcher prints it
    data = bad_dataset(tmp_path / "bad")
    flags = ["--dataset", str(data), "--output-dir", str(tmp_path / "out")]
    launches = {
        3: (accelerate_launch(2) + [str(STEPS[3]), *flags], {"ACCELERATE_USE_CPU": "1"}),
        4: ([sys.executable, str(STEPS[4]), *flags], {}),
    }
    started = {
        step: subprocess.Popen(
            words,
            cwd=REPO,
            env=offline_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for step, (words, env) in launches.items()
    }
    for step, process in started.items():
        output = process.communicate(timeout=300)[0]
        print(f"\nstep {step}, whole output:\n{output}")
        lines = [line for line in output.splitlines() if line.strip()]
        assert process.returncode == 1
        line = (
            f"error: dataset folder {data}: train split, line 3 of train.jsonl: label 2 is "
            "not 0 or 1 (MRPC's labels: 1 = paraphrase, 0 = not); write every label as 0 or 1"
        )
        assert [line for line in lines if line.startswith("error")] == [line]
        if step == 3:  # accelerate launch's report follows: torch elastic's ChildFailedError
            report = output.split(line, 1)[1]
            assert "ChildFailedError" in report and "[rank" not in output
            assert output.count("Traceback") == 1 and output.index("Traceback") > output.index(line)
        else:  # the step itself fails before notebook_launcher starts anything
            assert lines[-1] == line and "Traceback" not in output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("step", [3, 4])
def test_a_loss_that_turns_nan_in_a_launch_of_two_processes_is_named_once(tmp_path, step):
    # --lr 5e5 for 5e-5, step 3 as the README launches it, step 4 as it runs itself: the two
    # processes agree on the first step whose loss is NaN (2, measured here); step 3 stops
    # there, out of 50, and step 4, which reads its losses once after training, after its 20;
    # the main process says so in one line, then the launcher's own report; nothing is saved,
    # and no process is left behind
    out = tmp_path / "out"
    launch = accelerate_launch(2) if step == 3 else [sys.executable]
    steps = {3: 50, 4: 20}[step]
    process = subprocess.Popen(
        launch
        + [
            str(STEPS[step]),
            "--output-dir",
            str(out),
            "--lr",
            "5e5",
            "--max-train-steps",
            str(steps),
        ],
        cwd=REPO,
        env=offline_env(ACCELERATE_USE_CPU="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output = process.communicate(timeout=300)[0]
    errors = [line[line.index("error: ") :] for line in output.splitlines() if "error: " in line]
    assert process.returncode == 1, output[-3000:]
    assert errors == [
        "error: the loss of optimizer step 2 is nan: the training diverged, and "
        "nothing was saved; likely: --lr 500000 is far above fine-tuning's usual "
        "5e-5"
    ], output[-3000:]
    assert output.index("error: ") < output.index("Traceback")  # the launcher's report after
    assert "ChildFailedError" in output
    assert ("| 3/50 [" not in output) if step == 3 else ("| 20/20 [" in output)
    assert not out.exists() or not any(out.iterdir())
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])
    ]


def test_accelerate_launch_asked_for_two_processes_without_the_courses_config_is_refused(tmp_path):
    # the number of processes without --config_file or --multi_gpu: accelerate starts one
    out = tmp_path / "out"
    launch = [sys.executable, "-m", "accelerate.commands.launch"]
    one = run([*launch, "--num_processes", "2", str(STEPS[3]), "--output-dir", str(out)])
    assert one.returncode == 1
    assert [
        line for line in (one.stdout + one.stderr).splitlines() if line.startswith("error: ")
    ] == [
        "error: accelerate launch was asked for 2 processes but started this script as one "
        "process (without --multi_gpu, or a GPU for each process, it starts only one); run: "
        "ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml "
        f"--num_processes 2 {STEPS[3]} --output-dir {out}"
    ]
    assert not out.exists()


def test_a_world_size_left_in_the_shell_is_refused_in_one_line(tmp_path):
    result = run(
        step_command(3, tmp_path / "out", "--max-train-steps", "3"),
        WORLD_SIZE="2",
        RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29999",
        timeout=120,
    )
    assert result.returncode == 1
    assert (result.stdout + result.stderr).strip().splitlines() == [
        "error: WORLD_SIZE=2 is set here, but no launcher started this script (launchers set "
        "LOCAL_RANK too): an export left in this shell? unset WORLD_SIZE RANK MASTER_ADDR "
        "MASTER_PORT; then the command again, or launch it; run: ACCELERATE_USE_CPU=1 accelerate "
        f"launch --config_file configs/cpu-2-processes.yaml --num_processes 2 {STEPS[3]} "
        f"--output-dir {tmp_path / 'out'} --max-train-steps 3"
    ]


def listens_on(process, port):
    """Whether the process, or one it started, listens on the TCP port."""
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr.port == port
            for member in family
            for c in member.net_connections("tcp")
        )
    except psutil.Error:
        return False


def test_a_launch_that_waits_for_a_machine_ends_on_ctrl_backslash(tmp_path):
    # machine 0 of 2; machine 1 never comes: the launcher waits in its rendezvous (torch's
    # TCPStore, in C++), where Python acts on no Ctrl-C until the wait ends; Ctrl-\ (SIGQUIT),
    # which Python leaves to the system, ends it at once. torchrun and accelerate launch,
    # side by side (each mostly waits). Measured so, and written in docs/launching.md
    from common.cli import free_port

    started = {}
    for launcher in ("torchrun", "accelerate launch"):
        port = str(free_port())
        if launcher == "torchrun":
            words = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--node_rank",
                "0",
                "--nproc_per_node",
                "1",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                port,
            ]
        else:
            words = accelerate_launch(2) + [
                "--num_machines",
                "2",
                "--machine_rank",
                "0",
                "--main_process_ip",
                "127.0.0.1",
                "--main_process_port",
                port,
            ]
        log = tmp_path / f"{launcher}.out"
        with open(log, "w") as out:
            process = subprocess.Popen(
                [*words, str(STEPS[3]), "--output-dir", str(tmp_path / launcher / "out")],
                cwd=REPO,
                env=offline_env(ACCELERATE_USE_CPU="1"),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        started[launcher] = process, int(port), log
    for process, port, _log in started.values():
        deadline = time.monotonic() + 120
        while not listens_on(process, port) and time.monotonic() < deadline:
            time.sleep(0.2)  # until it serves its rendezvous on the port: waiting for machine 1
    time.sleep(1)
    families = {
        launcher: [
            process.pid,
            *(p.pid for p in psutil.Process(process.pid).children(recursive=True)),
        ]
        for launcher, (process, _, _) in started.items()
    }
    for process, _, _ in started.values():
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as a terminal sends it
    time.sleep(5)
    for launcher, (process, _, _) in started.items():
        assert process.poll() is None, f"{launcher} ended on Ctrl-C while it waited"
        os.killpg(process.pid, signal.SIGQUIT)  # Ctrl-\, as a terminal sends it
    start = time.monotonic()
    for launcher, (process, _, log) in started.items():
        process.wait(timeout=60)
        seconds = time.monotonic() - start
        print(
            f"\n{launcher} ended {seconds:.1f} s after Ctrl-\\, exit {process.returncode}:\n"
            f"{log.read_text().strip()}"
        )
        assert process.returncode == -signal.SIGQUIT  # a shell says 131
        assert seconds < 5
        assert not [
            pid
            for pid in families[launcher]
            if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        ]
