"""Launches that cannot lie: the commands a student types first, on real processes.

Without common/launch.py's check, on this machine without a GPU (measured with accelerate
1.15, torch 2.13): `accelerate launch --num_processes 2` ran step 3 as one process, exit 0;
`accelerate launch --multi_gpu --num_processes 2` without ACCELERATE_USE_CPU=1, and `torchrun
--nproc_per_node 2`, ran two separate one-process trainings that both wrote metrics.json,
exit 0. Now each either runs 2 processes joined in one group - every process confirming it
from inside, 416 predictions gathered, 408 kept, the same losses and predictions as the
README's command - or stops before loading anything with one `error:` line that gives the
whole command to type, and that command, run as given, joins. The check sets nothing.
And a run stopped by Ctrl-C or SIGTERM says so in one line per process, writes nothing,
leaves no process (Ctrl-C reaches every process of a launch, as in a terminal; SIGTERM
reaches the launching process only, as `kill` does); the launcher's own report follows.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, STEPS, offline_env, run_command, run_step, slurm_task

from accelerate_course.commands import accelerate_launch, course_commands
from accelerate_course.lab_runs import run_on_two_machines, run_scripts
from common.cli import free_port

VALIDATION_SIZE = 408


def same_as_the_readme_command(run, reference):
    """A 2-process run joined like the README's accelerate launch, with its numbers."""
    assert run.error is None
    assert (
        run.processes_reporting == 2 and run.processes_alone == 0 and run.accelerator_processes == 2
    )
    assert run.distributed_type == "DistributedType.MULTI_CPU"
    assert run.gathered == 416 and len(run.predictions) == VALIDATION_SIZE
    assert run.predictions == run.alone_predictions
    assert run.losses == reference.losses
    assert run.predictions == reference.predictions
    assert (run.accuracy, run.f1) == (reference.accuracy, reference.f1)
    assert run.writes == 1


def one_error_line(output):
    """Return the only `error:` line of an output (and check that there is exactly one)."""
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, output[-3000:]
    return errors[0]


@pytest.mark.runs
def test_accelerate_launch_without_multi_gpu_is_refused_with_the_command_that_works(tmp_path):
    # the simple launcher starts the script once; it used to train as 1 process, exit 0
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        str(STEPS[3]),
        "--output-dir",
        str(tmp_path),
    ]
    result = run_command(command)
    assert result.returncode != 0
    line = one_error_line(result.stdout + result.stderr)
    assert "accelerate launch was asked for 2 processes but started this script as one" in line
    assert (
        "ACCELERATE_USE_CPU=1 accelerate launch --config_file configs/cpu-2-processes.yaml "
        "--num_processes 2"
    ) in line
    assert not (tmp_path / "metrics.json").exists()
    # the step stopped before loading the data or the model: no load report was printed
    assert "LOAD REPORT" not in result.stdout + result.stderr


@pytest.mark.runs
@pytest.mark.parametrize(
    "launch",
    [
        "torchrun --nproc_per_node 2",
        "accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no "
        "--dynamo_backend no",
    ],
)
def test_a_launch_without_accelerate_use_cpu_is_refused_and_the_command_it_names_joins(
    tmp_path, launch
):
    # without ACCELERATE_USE_CPU=1, Accelerate would make each of the 2 processes a run of its
    # own; the check names the command with the setting, which then runs as given
    typed = f"{launch} {STEPS[3].relative_to(REPO)} --output-dir {tmp_path} --max-train-steps 3"
    refused = run_command(["bash", "-c", f". {REPO}/.venv/bin/activate 2>/dev/null; {typed}"])
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert one_error_line(output) == (
        "error: 2 processes were launched on a machine without a GPU, and without "
        "ACCELERATE_USE_CPU=1 Accelerate makes each of them a run of its own, on all the data; "
        f"run: ACCELERATE_USE_CPU=1 {typed}"
    )
    assert output.index("error: ") < output.index("Traceback")  # the launcher's report follows
    assert not (tmp_path / "metrics.json").exists()
    given = one_error_line(output).split("run: ", 1)[1]
    joined = run_command(["bash", "-c", f". {REPO}/.venv/bin/activate 2>/dev/null; {given}"])
    assert joined.returncode == 0, (joined.stdout + joined.stderr)[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert (metrics["num_processes"], metrics["eval_gathered"], metrics["eval_samples"]) == (
        2,
        416,
        VALIDATION_SIZE,
    )


def test_torchrun_on_one_machine_equals_accelerate_launch(tmp_path, readme_run):
    run = run_scripts(3, {"lesson": STEPS[3]}, tmp_path, launcher="torchrun")["lesson"]
    same_as_the_readme_command(run, readme_run)


def test_torchrun_on_two_nodes_over_loopback_equals_accelerate_launch(tmp_path, readme_run):
    from test_step3_distributed import check_inside

    run = run_on_two_machines(
        3, {"lesson": STEPS[3]}, tmp_path, launcher="torchrun", machine_env=slurm_task
    )["lesson"]
    check_inside(tmp_path / "lesson", 2)
    same_as_the_readme_command(run, readme_run)


def test_the_plain_loop_launched_on_two_processes_is_refused(tmp_path, monkeypatch, capsys):
    # what torchrun --nproc_per_node 2 step1_plain_loop/train.py leaves in each process
    import runpy

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")  # a launcher's process (torchrun sets it)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(sys, "argv", [str(STEPS[1]), "--output-dir", str(tmp_path)])
    step = runpy.run_path(str(STEPS[1]), run_name="step1")
    with pytest.raises(SystemExit) as stop:
        step["main"]()
    assert str(stop.value).startswith(
        "error: this script was launched as 2 processes, but it is the plain loop"
    )
    assert not (tmp_path / "metrics.json").exists()


TYPED = ["torchrun", "--nproc_per_node", "2", "step3_distributed_eval/train.py"]


@pytest.mark.parametrize(
    "gpus,use_cpu,expected",
    [
        # no GPU: Accelerate joins the processes on the CPU only when told
        (
            0,
            False,
            "2 processes were launched on a machine without a GPU, and without "
            "ACCELERATE_USE_CPU=1 Accelerate makes each of them a run of its own, on all the "
            "data; run: ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 "
            "step3_distributed_eval/train.py",
        ),
        (0, True, None),
        # one GPU, two processes: on the GPU as one process, or on the CPU with the GPU hidden
        (
            1,
            False,
            "2 processes were launched on this machine, but it has 1 GPU, and each process "
            "needs a GPU of its own; run on the CPU: CUDA_VISIBLE_DEVICES= "
            "ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 "
            "step3_distributed_eval/train.py; or on the GPU: python "
            "step3_distributed_eval/train.py",
        ),
        (
            1,
            True,
            "these 2 processes run on the CPU (ACCELERATE_USE_CPU=1) but see 1 GPU, and "
            "Accelerate's barrier asks for GPU <local rank> even for them; run on the CPU: "
            "CUDA_VISIBLE_DEVICES= ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 "
            "step3_distributed_eval/train.py; or on the GPU: python "
            "step3_distributed_eval/train.py",
        ),
        (2, False, None),  # one GPU each: Accelerate's own multi-GPU group (nccl)
        (
            3,
            True,
            "these 2 processes run on the CPU (ACCELERATE_USE_CPU=1) but see 3 GPUs, and "
            "Accelerate's barrier asks for GPU <local rank> even for them; run on the CPU: "
            "CUDA_VISIBLE_DEVICES= ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 "
            "step3_distributed_eval/train.py; or on the GPU: torchrun --nproc_per_node 3 "
            "step3_distributed_eval/train.py",
        ),
    ],
)
def test_the_launch_check_against_the_gpus_of_the_machine(
    monkeypatch, capsys, gpus, use_cpu, expected
):
    # simulated: the GPU count and the launcher's command line are faked; the check only
    # looks: it changes no variable of the environment, and prints nothing when all is right
    from common import launch

    monkeypatch.setenv("ACCELERATE_USE_CPU", "1" if use_cpu else "")
    for name in ("MASTER_ADDR", "ACCELERATE_DYNAMO_BACKEND", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "RANK": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", TYPED[3:])
    monkeypatch.setattr(launch, "gpus_here", lambda: gpus)
    monkeypatch.setattr(launch, "xla_installed", lambda: False)
    monkeypatch.setattr(
        launch,
        "the_launcher",
        lambda: ([sys.executable, "/home/student/.venv/bin/torchrun", *TYPED[1:]], {}),
    )
    before = dict(os.environ)
    assert launch.launch_problem(script_joins_processes=True) == expected
    assert dict(os.environ) == before and capsys.readouterr().out == ""


# the course runner's plan -------------------------------------------------------------------

ONE = {"OMP_NUM_THREADS": "1"}  # one thread per CPU process: numbers that do not depend on cores
CPU = {"ACCELERATE_USE_CPU": "1", **ONE}
GPU = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}  # deterministic cuBLAS, with --deterministic


@pytest.mark.parametrize(
    "gpus,tpu,launches",
    [
        (
            0,
            False,
            {
                1: ("python", 1, ONE),
                2: ("python", 1, ONE),
                3: ("accelerate launch", 2, CPU),
                4: ("notebook_launcher", 2, ONE),
            },
        ),
        # one GPU: the CPU processes of steps 3 and 4 are not shown it (CUDA_VISIBLE_DEVICES= in
        # their command, as common/launch.py asks)
        (
            1,
            False,
            {
                1: ("python", 1, GPU),
                2: ("python", 1, GPU),
                3: ("accelerate launch", 2, {**CPU, "CUDA_VISIBLE_DEVICES": ""}),
                4: ("notebook_launcher", 2, {**CPU, "CUDA_VISIBLE_DEVICES": ""}),
            },
        ),
        (
            2,
            False,
            {
                1: ("python", 1, GPU),
                2: ("python", 1, GPU),
                3: ("accelerate launch", 2, {}),
                4: ("notebook_launcher", 2, {}),
            },
        ),
        (8, False, {3: ("accelerate launch", 2, {}), 4: ("notebook_launcher", 2, {})}),
        (
            0,
            True,
            {
                1: ("python", 1, {**ONE, "USE_TORCH_XLA": "0"}),
                3: ("accelerate launch", 2, {**CPU, "USE_TORCH_XLA": "0"}),
                4: ("notebook_launcher", 0, {"PJRT_DEVICE": "TPU"}),
            },
        ),
        # a TPU machine whose environment has no torch_xla (make course's .venv): step 4 on CPU
        # processes, PJRT_DEVICE emptied so that notebook_launcher does not take its TPU branch
        (
            0,
            "no torch_xla",
            {4: ("notebook_launcher", 2, {**ONE, "USE_TORCH_XLA": "0", "PJRT_DEVICE": ""})},
        ),
    ],
)
def test_the_launch_plan_for_each_kind_of_machine(gpus, tpu, launches):
    planned = course_commands(gpus, bool(tpu), xla=tpu is True, tpu_branch=tpu is True)
    for step, (launcher, processes, env) in launches.items():
        assert (planned[step].launcher, planned[step].processes, planned[step].env) == (
            launcher,
            processes,
            env,
        ), step
    if gpus == 1:
        assert "one GPU cannot take 2 processes" in planned[3].where
    # on a GPU, steps 1 and 2 run with deterministic kernels (else they cannot be identical)
    deterministic = gpus > 0 and not tpu
    if tpu == "no torch_xla":
        assert "torch_xla is not installed here" in planned[4].where
    assert all(("--deterministic" in planned[step].command) == deterministic for step in (1, 2))
    assert not any("--deterministic" in planned[step].command for step in (3, 4))
    # on 2 GPUs and more, one process per GPU up to the number asked
    assert course_commands(8, processes=4)[3].processes == 4
    assert course_commands(3, processes=4)[3].processes == 3
    assert course_commands(0, launcher="torchrun")[3].command[:3] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
    ]


def test_a_tpu_vm_outside_colab_and_kaggle_runs_step4_on_the_cpu_and_says_why():
    # with torch_xla installed, but where notebook_launcher does not take its TPU branch (it
    # takes it only in Colab or Kaggle): its other branch would start every process on the
    # TPU at once, so the runner plans CPU processes and says where the TPU is used
    planned = course_commands(0, True, xla=True, tpu_branch=False)[4]
    assert (planned.processes, planned.env) == (2, {**ONE, "USE_TORCH_XLA": "0", "PJRT_DEVICE": ""})
    assert "uses a TPU only in a Colab or Kaggle notebook" in planned.where
    # in a Kaggle kernel's shell (its KAGGLE_* variables), the TPU branch
    assert course_commands(0, True, xla=True, tpu_branch=True)[4].processes == 0


# stopped runs ----------------------------------------------------------------------------


def start_and_stop(command, tmp_path, sig, whole_group=True, **env):
    """Start a run, wait until training shows progress (its bar of 690 optimizer steps: 2
    processes, 3 epochs), send it sig (to its whole process group, as Ctrl-C in a terminal
    does); return (exit code, output, processes left)."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=offline_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    seen = b""
    deadline = time.time() + 120
    while b"/690 [" not in seen and time.time() < deadline:
        chunk = os.read(process.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    assert b"/690 [" in seen, seen.decode(errors="replace")[-2000:]
    if whole_group:
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    rest, _ = process.communicate(timeout=120)
    time.sleep(1)
    left = subprocess.run(["pgrep", "-g", str(process.pid)], capture_output=True, text=True)
    return process.returncode, (seen + rest).decode(errors="replace"), left.stdout.split()


@pytest.mark.runs
def test_ctrl_c_on_a_two_process_launch_stops_everything_and_says_so(tmp_path):
    command = accelerate_launch(2) + [
        "--main_process_port",
        str(free_port()),
        str(STEPS[3]),
        "--output-dir",
        str(tmp_path),
    ]
    code, output, left = start_and_stop(command, tmp_path, signal.SIGINT, ACCELERATE_USE_CPU="1")
    assert code != 0
    stopped = sorted(line for line in output.splitlines() if line.startswith("stopped by"))
    # each process in one line (accelerate's launcher hands the Ctrl-C on to its processes),
    # then the launcher's own report (torch elastic's SignalException)
    assert stopped == [
        f"stopped by Ctrl-C (SIGINT) before the end of the run (process {rank} "
        "of 2): no metrics were written"
        for rank in (0, 1)
    ]
    assert (
        "SignalException" in output.split(stopped[-1], 1)[-1]
        or "SignalException" in output.split(stopped[0], 1)[-1]
    )
    assert not (tmp_path / "metrics.json").exists()
    assert not list(tmp_path.glob(".metrics-*"))
    assert left == []  # no process of the launch is left


# Ctrl-C while Python runs a weakref callback (garbage collection, in torch or in the
# course's code): an exception raised there is printed as "Exception ignored" and lost, and the
# process goes on. The course's handler raises nothing: it prints its line and exits at once.
CTRL_C_IN_A_CALLBACK = """
import os, signal, weakref
from common.launch import stop_in_one_line
stop_in_one_line()
class Garbage:
    pass
def callback(ref):
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(3))  # the handler runs here, inside the callback
garbage = Garbage()
ref = weakref.ref(garbage, callback)
del garbage
print("went on", flush=True)
"""


# ... or a Ctrl-C that arrives while the process already reports an error through
# sys.excepthook (torch.distributed installs its own hook in every process it joins)
CTRL_C_WHILE_REPORTING = """
import signal, sys
from common.launch import stop_in_one_line
stop_in_one_line()
def reporting_hook(*args):
    signal.raise_signal(signal.SIGINT)  # its handler runs as the next call starts
    sys.__excepthook__(*args)
sys.excepthook = reporting_hook
raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                   "[127.0.0.1]:3970")
"""


@pytest.mark.runs
@pytest.mark.parametrize(
    "case,script",
    [
        ("inside a weakref callback", CTRL_C_IN_A_CALLBACK),
        ("while reporting an error", CTRL_C_WHILE_REPORTING),
    ],
)
def test_ctrl_c_at_an_awkward_moment_still_ends_the_run_as_stopped(case, script):
    result = run_command([sys.executable, "-c", script])
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        "stopped by Ctrl-C (SIGINT) before the end of the run: no metrics were written"
    ]
    assert "went on" not in result.stdout


@pytest.mark.runs
def test_sigterm_on_notebook_launcher_stops_its_processes_and_says_so(tmp_path):
    # SIGTERM (kill, a job scheduler) to the one process that was started, step 4's: it stops
    # the processes notebook_launcher forked, says so in one line, and leaves nothing
    command = [sys.executable, str(STEPS[4]), "--num-processes", "2", "--output-dir", str(tmp_path)]
    code, output, left = start_and_stop(command, tmp_path, signal.SIGTERM, whole_group=False)
    assert code != 0
    # torch elastic, inside notebook_launcher, stops the 2 processes it forked; each says so in
    # its line, then notebook_launcher's own report (SignalException) ends the launching process
    stopped = sorted(line for line in output.splitlines() if line.startswith("stopped by"))
    assert stopped == [
        f"stopped by SIGTERM before the end of the run (process {rank} of 2): "
        "no metrics were written"
        for rank in (0, 1)
    ]
    assert "SignalException" in output
    assert not (tmp_path / "metrics.json").exists() and left == []


@pytest.mark.runs
def test_step4_on_a_port_another_program_holds_is_refused_in_one_line(tmp_path):
    # a student's --port that another run (or another user's) listens on: torch's store
    # cannot listen there; the step says which port and how to get a free one
    import socket

    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_step(
            4, tmp_path, "--num-processes", "2", "--max-train-steps", "2", "--port", str(port)
        )
    output = result.stdout + result.stderr
    assert result.returncode == 1
    assert one_error_line(output) == (
        f"error: port {port} is taken on this machine (another "
        "run, or another user's, listens on it); run again with "
        "--port 0 to use a free port"
    )
    assert "Traceback" not in output
    assert not (tmp_path / "metrics.json").exists()


# step 4's own launch: notebook_launcher, on machines that are not this one (simulated) -----


class FakeIPython:
    """What sys.modules["IPython"] looks like to accelerate inside a Colab notebook."""

    @staticmethod
    def get_ipython():
        return "<google.colab._shell.Shell object>"


@pytest.mark.parametrize(
    "where,env,colab,expected",
    [
        ("a terminal", {}, False, True),
        ("a Kaggle notebook", {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, False, True),
        ("a Colab notebook", {}, True, False),  # fewer than 2 GPUs: in this process
        (
            "a Kaggle TPU",
            {"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "PJRT_DEVICE": "TPU"},
            False,
            False,
        ),
    ],
)
@pytest.mark.runs
def test_the_course_reads_notebook_launchers_branch_as_accelerate_takes_it(
    monkeypatch, where, env, colab, expected
):
    # the course's copy of notebook_launcher's choice (common/launch.py) against the real one:
    # does notebook_launcher(fn, num_processes=2) start processes here, or call fn in this one?
    import os

    from accelerate import notebook_launcher

    from common import launch

    for name in [n for n in os.environ if n.startswith("KAGGLE")] + ["PJRT_DEVICE", "TPU_NAME"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if colab:
        monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert launch.notebook_launcher_starts_processes(2) is expected, where
    if env.get("PJRT_DEVICE") == "TPU":
        return  # accelerate would import torch_xla there: not installed here
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    calls = []
    parent = os.getpid()
    notebook_launcher(lambda: calls.append(os.getpid()), num_processes=2, use_port=str(free_port()))
    # in this process, calls holds this pid; forked processes leave this list empty
    assert (calls != [parent]) is expected, where


@pytest.mark.parametrize(
    "gpus,env,platform,expected",
    [
        (1, {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "linux", "fewer"),  # Kaggle, 1 GPU
        (1, {}, "linux", "fewer"),  # a workstation with one GPU
        (3, {}, "linux", "fewer"),  # 3 GPUs, 4 processes asked below
        (2, {"ACCELERATE_USE_CPU": "1"}, "linux", "seen"),  # CPU processes that would see GPUs
        (4, {}, "linux", None),  # one GPU each
        (0, {}, "linux", None),  # no GPU: the step's Accelerator(cpu=True) joins them with gloo
        (0, {}, "win32", "windows"),
    ],
)
def test_step4s_launch_with_fewer_gpus_than_processes_names_both_commands(
    monkeypatch, capsys, gpus, env, platform, expected
):
    # simulated: the GPU count is faked; with CUDA_VISIBLE_DEVICES= the step's own
    # Accelerator(cpu=...) line finds no GPU and joins the processes on the CPU (run here by
    # the lesson's runs, where there is none)
    from common import launch

    n = 4 if gpus == 3 else 2
    for name in [k for k in os.environ if k.startswith("KAGGLE")] + [
        "ACCELERATE_USE_CPU",
        "CUDA_VISIBLE_DEVICES",
    ]:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(launch, "gpus_here", lambda: gpus)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(sys, "argv", ["step4_tpu_notebook/train.py", "--num-processes", str(n)])
    before = dict(os.environ)
    problem = launch.start_problem(n)
    assert dict(os.environ) == before and capsys.readouterr().out == ""
    seen = f"{gpus} GPU{'s' if gpus > 1 else ''}"
    commands = (
        f"; on the GPU: python step4_tpu_notebook/train.py --num-processes {gpus}; or "
        f"{n} processes on the CPU: CUDA_VISIBLE_DEVICES= python "
        f"step4_tpu_notebook/train.py --num-processes {n}"
    )
    if expected == "windows":
        assert problem.startswith(
            "notebook_launcher starts its 2 processes by forking, which "
            "Windows cannot do; run with --num-processes 1, or on Windows, "
            "run the course in WSL"
        )
    elif expected == "fewer":
        assert problem == (
            f"{n} processes asked for and {seen} here, and each process needs a "
            f"GPU of its own{commands}"
        )
    elif expected == "seen":
        assert problem == (
            f"ACCELERATE_USE_CPU=1 puts the {n} processes on the CPU, but they "
            f"would see {seen}, and Accelerate's barrier asks for GPU <local "
            f"rank> even for them{commands}"
        )
    else:
        assert problem is None
