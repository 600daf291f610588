"""GPUs this torch cannot use, and cluster launches, simulated on a machine without either.

- The course runner's GPU check (accelerate_course.torch_build.gpu_problem) is given a torch
  whose CUDA answers are those of the machine simulated (a P100, a V100, an H200, a driver too
  old for the build, a CPU build beside an NVIDIA driver); the decision uses torch's own table
  of which compiled code runs on which compute capability (torch/cuda/__init__.py, torch 2.13.0).
- A cluster task is a real process given the environment SLURM gives it: srun's variables
  without a launcher, or a job script's exported MASTER_ADDR around a one-process launch.
  (Two machines on loopback, each started as SLURM starts a task, are in
  test_step3_distributed.py.)
"""

import re
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import DETERMINISTIC, REPO, STEPS, assert_ok, read_metrics, run_command, run_step

from accelerate_course.commands import accelerate_launch
from accelerate_course.torch_build import gpu_problem, nvidia_driver

# the x86-64 CUDA 13.0 build's compiled architectures, from torch's own table of its releases
CUDA13_ARCHS = [f"sm_{cc}" for cc in sorted(torch.cuda.PYTORCH_RELEASES_CODE_CC["13.0"]["x86_64"])]
DRIVER_535 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 "
    "UTC 2024\nGCC version:  gcc version 12.2.0\n"
)
DRIVER_580_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.03  Release "
    "Build  (dvs-builder@U16-I3-B12-2-3)\n"
)


def fake_torch(capability=(9, 0), name="NVIDIA H200", counted=1, starts=True, cuda="13.0"):
    """A torch whose CUDA answers are those of the machine simulated (the rest is real)."""
    return SimpleNamespace(
        __version__=f"2.13.0+cu{cuda.replace('.', '')}" if cuda else "2.13.0+cpu",
        version=SimpleNamespace(cuda=cuda, hip=None),
        cuda=SimpleNamespace(
            device_count=lambda: counted,
            is_available=lambda: starts,
            get_arch_list=lambda: CUDA13_ARCHS,
            get_device_capability=lambda index: capability,
            get_device_name=lambda index: name,
        ),
    )


@pytest.fixture
def driver(tmp_path):
    """Write an NVIDIA driver's /proc/driver/nvidia/version; return its path."""

    def write(text):
        path = tmp_path / "version"
        path.write_text(text)
        return str(path)

    return write


def test_the_driver_version_is_read_from_both_kinds_of_kernel_module(driver, tmp_path):
    assert nvidia_driver(driver(DRIVER_535)) == "535.183.01"
    assert nvidia_driver(driver(DRIVER_580_OPEN)) == "580.159.03"
    assert nvidia_driver(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    "capability,name", [((6, 0), "Tesla P100-PCIE-16GB"), ((7, 0), "Tesla V100-SXM2-16GB")]
)
def test_a_gpu_the_cuda13_build_has_no_kernels_for_is_named_with_the_build_that_has(
    driver, capability, name
):
    line = gpu_problem(fake_torch(capability, name), driver(DRIVER_580_OPEN))
    assert line.startswith(
        f"GPU 0 ({name}, compute capability {capability[0]}.{capability[1]}) "
        "has no kernels in torch 2.13.0+cu130"
    )
    assert "no kernel image is available" in line
    # torch's table: of 2.13's builds only CUDA 12.6's has sm_60 and sm_70 code
    assert line.endswith(
        "install a build that has them: pip install torch==2.13.0 "
        "--index-url https://download.pytorch.org/whl/cu126"
    )


@pytest.mark.parametrize("capability", [(7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (12, 0)])
def test_gpus_the_build_has_kernels_for_pass(driver, capability):
    # T4, A100, RTX 3090, L4, H100/H200, RTX 5090
    assert gpu_problem(fake_torch(capability), driver(DRIVER_580_OPEN)) is None


def test_a_driver_too_old_for_cuda13_is_named_with_the_build_it_can_run(driver):
    # NVML counts the GPU, CUDA does not start: torch would silently run on the CPU
    line = gpu_problem(fake_torch(counted=1, starts=False), driver(DRIVER_535))
    assert line == (
        "torch 2.13.0+cu130 counts 1 GPU but CUDA 13.0 cannot start on them: the "
        "NVIDIA driver (535.183.01) is older than CUDA 13.0 needs (580 or newer); "
        "update the driver, or: pip install torch==2.13.0 --index-url "
        "https://download.pytorch.org/whl/cu129"
    )


def test_a_cpu_build_beside_an_nvidia_driver_says_how_to_get_the_gpu(driver):
    line = gpu_problem(fake_torch(cuda=None), driver(DRIVER_580_OPEN))
    assert line.startswith(
        "an NVIDIA driver (580.159.03) is here, but torch 2.13.0+cpu is a CPU "
        "build; for the GPU: pip install torch==2.13.0"
    )
    assert gpu_problem(fake_torch(cuda=None), driver("")) is None  # a laptop without a GPU


def test_the_runner_puts_an_unusable_gpu_aside_and_says_why(monkeypatch, driver):
    from accelerate_course import machine

    monkeypatch.setattr(machine, "gpu_problem", lambda torch: "GPU 0 (Tesla P100) has no kernels")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    import os

    before = dict(os.environ)
    gpus, tpu, mps, words, aside = machine.machine()
    assert (gpus, tpu, mps, aside) == (0, False, False, True)
    assert words.endswith("; GPU 0 (Tesla P100) has no kernels")
    assert dict(os.environ) == before  # the runner's own environment is left as it was
    # every step runs on the CPU, as planned, the GPU hidden in its own command
    from accelerate_course.commands import course_commands

    planned = course_commands(gpus, gpu_aside=aside)
    assert all(command.env.get("CUDA_VISIBLE_DEVICES") == "" for command in planned.values())


# clusters ---------------------------------------------------------------------------------

# what srun gives a task of `srun --ntasks 2 python step2_accelerate/train.py` (no launcher)
SRUN_TASK = dict(
    SLURM_JOB_ID="4242",
    SLURM_NTASKS="2",
    SLURM_STEP_NUM_TASKS="2",
    SLURM_PROCID="1",
    SLURM_LOCALID="1",
    SLURM_NODEID="0",
)


@pytest.mark.runs
def test_srun_without_a_launcher_is_refused_in_one_line(tmp_path):
    # a real process of step 2 (step 1 alike: the same check_launch, before anything loads)
    result = run_step(2, tmp_path, "--max-train-steps", "2", **SRUN_TASK)
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert output.strip() == (
        "error: srun started this script as 2 separate tasks, without a "
        "launcher (no WORLD_SIZE): each would train alone on all the "
        "data; start one task per machine that runs torchrun or "
        "accelerate launch (docs/cluster.md)"
    )
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.runs
def test_a_job_scripts_master_addr_does_not_refuse_a_one_process_launch(tmp_path):
    # SLURM and Kubernetes job scripts export MASTER_ADDR for every command they run; the
    # one-process accelerate launch (configs/1-process.yaml) passes it on unchanged
    command = accelerate_launch(1) + [
        str(STEPS[2]),
        "--output-dir",
        str(tmp_path),
        "--max-train-steps",
        "2",
    ]
    result = run_command(
        command, MASTER_ADDR="10.1.2.3", MASTER_PORT="29400", SLURM_JOB_ID="4242", SLURM_NTASKS="1"
    )
    assert_ok(result)
    assert read_metrics(tmp_path)["num_processes"] == 1


def test_deterministic_kernels_change_nothing_on_the_cpu(lab_runs):
    # make course passes --deterministic to steps 1 and 2 on a CUDA GPU; on the CPU the
    # course's kernels are deterministic already, so the flag runs and changes no number:
    # step 1 with it equals the lab's short run of step 1 without it, in the same launch
    one = lab_runs(2).one
    without, deterministic = one["step1"], one[DETERMINISTIC]
    assert deterministic.error is None, deterministic.error
    assert deterministic.losses == without.losses and len(without.losses) == 30
    assert deterministic.predictions == without.predictions


@pytest.mark.runs
def test_a_machine_that_goes_away_stops_the_other_within_seconds(tmp_path):
    # two "machines" on loopback, each a torchrun of one process as srun starts it; machine 1
    # goes away mid-training (its launcher and worker killed at once, as when a node dies or
    # a job step is cancelled): machine 0's worker gets gloo's error at its next collective,
    # which torch reports as it reports it (the course adds nothing), then its launcher's report
    import os
    import re
    import signal
    import subprocess
    import time

    import psutil
    from conftest import REPO, offline_env, slurm_task

    from common.cli import free_port

    port = free_port()
    machines = []
    for rank in (0, 1):
        words = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "2",
            "--node_rank",
            str(rank),
            "--nproc_per_node",
            "1",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            str(STEPS[3]),
            "--output-dir",
            str(tmp_path / f"machine{rank}"),
        ]
        machines.append(
            subprocess.Popen(
                words,
                cwd=REPO,
                env=offline_env(ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1", **slurm_task(rank)),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    try:
        seen = b""
        deadline = time.monotonic() + 300
        while (
            time.monotonic() < deadline
            and max(map(int, re.findall(rb"(\d+)/690 \[", seen)), default=0) < 10
        ):
            chunk = os.read(machines[0].stdout.fileno(), 4096)  # until training shows steps
            assert chunk, seen.decode(errors="replace")[-3000:]
            seen += chunk
        # the whole machine: its launcher and its worker (torchrun starts each worker in a
        # session of its own, so killing the launcher's group would leave the worker training)
        doomed = [
            machines[1].pid,
            *(child.pid for child in psutil.Process(machines[1].pid).children(recursive=True)),
        ]
        for pid in doomed:
            os.kill(pid, signal.SIGKILL)
        machines[1].wait()
        gone = time.monotonic()
        output, _ = machines[0].communicate(timeout=120)
        seconds = time.monotonic() - gone
    finally:
        for machine in machines:
            for child in (
                psutil.Process(machine.pid).children(recursive=True)
                if machine.poll() is None
                else []
            ):
                child.kill()
            machine.kill()
    output = (seen + output).decode(errors="replace")
    assert machines[0].returncode != 0
    assert "Connection closed by peer" in output or "Connection reset by peer" in output
    assert "ChildFailedError" in output  # torchrun's own report, last
    assert seconds < 60  # gloo reports the closed connection at once (seen: 1 to 2 s)
    assert not (tmp_path / "machine0" / "metrics.json").exists()
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert left == "", left


@pytest.mark.runs
def test_the_gpu_check_without_a_gpu_says_so_in_one_line():
    result = run_command([sys.executable, "-m", "accelerate_course.maintain.gpu_check"])
    assert result.returncode == 1
    assert (result.stdout + result.stderr).strip() == (
        "error: no CUDA GPU here (torch.cuda.is_available() is False); make gpu-check runs on a "
        "machine with an NVIDIA GPU"
    )


@pytest.mark.runs
def test_a_rehearsal_of_the_gpu_check_on_a_cpu_says_no_for_every_gpu_row(tmp_path):
    # every row runs for real (3 optimizer steps) on this machine, which has no GPU: each
    # verdict comes from the row's own run (the device its step reports), so every row that
    # needs the GPU says NO, and the one CPU row (the README's 2 CPU processes) holds; the
    # rows of 1 process two at a time (no time is read here)
    from accelerate_course.commands import course_commands
    from accelerate_course.maintain import gpu_check

    rows = gpu_check.check_rows(
        course_commands(1), ("--max-train-steps", "3"), tmp_path, together=2
    )
    assert [row.name for row in rows] == [
        "step1",
        "step2",
        "step3-gpu",
        "step3-cpu",
        "step4",
        "step4-1",
    ]
    assert all(row.accuracy != "FAILED" for row in rows), rows  # each ran to its end
    assert [row.name for row in rows if row.on_gpu and row.holds] == []
    assert [row.name for row in rows if not row.on_gpu] == ["step3-cpu"]
    assert all(row.holds for row in rows if not row.on_gpu), rows
    assert {row.device for row in rows} <= {"cpu", "cpu:0"}


# the launches a student types, on a machine without a GPU and on one with one GPU -------------

ONE_GPU_MACHINE = REPO / "tests" / "helpers" / "one_gpu_machine"  # its sitecustomize.py
LAUNCHES = {  # as typed (relative paths, from the repository's root), then the course's flags
    "the README's step 3": "ACCELERATE_USE_CPU=1 accelerate launch --config_file "
    "configs/cpu-2-processes.yaml step3_distributed_eval/train.py",
    "accelerate launch, no config": "accelerate launch --num_processes 2 "
    "step3_distributed_eval/train.py",
    "torchrun": "torchrun --nproc_per_node 2 step3_distributed_eval/train.py",
    "step 4": "python step4_tpu_notebook/train.py --num-processes 2",
}


def typed(command, tmp_path, gpus):
    """Run a command as a student types it in a shell at the repository's root, on this
    machine (gpus=0) or on the simulated one-GPU machine (gpus=1); return (exit code,
    output, the metrics.json it wrote or None)."""
    import os
    import shutil

    from conftest import offline_env

    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = offline_env(PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    env.pop("CUDA_VISIBLE_DEVICES")  # a machine does not hide its GPUs
    if gpus:
        env["PYTHONPATH"] = os.pathsep.join([str(ONE_GPU_MACHINE), str(REPO)])
        env["ONE_GPU_REPORTS"] = str(tmp_path / "reports")  # what each process saw, there
        (tmp_path / "reports").mkdir(exist_ok=True)
    done = run_command(["bash", "-c", command], environment=env)
    metrics = read_metrics(out) if (out / "metrics.json").exists() else None
    return done.returncode, done.stdout + done.stderr, metrics


@pytest.mark.runs
@pytest.mark.parametrize("gpus", [0, 1], ids=["no GPU", "one GPU (simulated)"])
def test_each_launch_a_student_types_joins_or_names_the_command_that_does(tmp_path, gpus):
    # on a machine without a GPU (this one) and on one with one GPU (simulated: torch answers
    # as such a machine does, and Accelerate's barrier fails there as it did on a real H200
    # when a CPU process asks for a GPU the CUDA runtime does not have). A launch that needs a
    # setting is refused before it loads anything, in one line that gives the whole command;
    # that command, run as given, joins 2 processes: 416 predictions gathered, 408 kept
    flags = f" --output-dir {tmp_path / 'out'} --max-train-steps 3"
    rows = []
    for name, launch in LAUNCHES.items():
        code, output, metrics = typed(launch + flags, tmp_path, gpus)
        named = [line for line in output.splitlines() if line.startswith("error: ")]
        if not named:
            assert code == 0, output[-3000:]
            rows.append((name, "joins", "", metrics))
            continue
        assert code != 0 and len(named) == 1 and metrics is None, output[-3000:]
        command = re.search(r"(?:run|on the CPU): (.*?)(?:; or on the GPU|$)", named[0]).group(1)
        if gpus:
            assert command.startswith("CUDA_VISIBLE_DEVICES= "), named[0]
            assert "; or on the GPU: python " in named[0] or "on the GPU: python " in named[0]
        code, output, metrics = typed(command, tmp_path, gpus)
        assert code == 0, output[-3000:]
        rows.append((name, "refused", command, metrics))
    print(f"\n{'one GPU (simulated)' if gpus else 'no GPU'}:")
    for name, what, command, metrics in rows:
        print(
            f"  {name}: {what}{', names: ' + command if command else ''} -> "
            f"{metrics['num_processes']} processes, {metrics['eval_gathered']} gathered, "
            f"{metrics['eval_samples']} kept"
        )
        assert (
            metrics["num_processes"],
            metrics["eval_gathered"],
            metrics["eval_samples"],
            metrics["device"],
        ) == (2, 416, 408, "cpu:0")
    expected = {0: ["joins", "refused", "refused", "joins"], 1: ["refused"] * 4}[gpus]
    assert [what for _, what, _, _ in rows] == expected
