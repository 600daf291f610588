"""Which build of torch this machine has, and whether it can use the machine's NVIDIA GPUs.

gpu_problem(torch) says, in one line, why a torch cannot use the GPUs it counts and which build
would (from torch's own tables of its release builds); the launch plan prints it, and the
steps then run on the CPU.
"""

import re
from pathlib import Path

# the oldest NVIDIA driver each CUDA major version runs on (NVIDIA's CUDA release notes, minor
# version compatibility): a torch wheel built for CUDA 13.x needs 580, one for 12.x needs 525
MIN_DRIVER = {12: 525, 13: 580}


def nvidia_driver(version_file="/proc/driver/nvidia/version"):
    """Return the NVIDIA kernel driver's version (e.g. '535.183.01'), or None if there is none
    (or not on Linux)."""
    try:
        text = Path(version_file).read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+[\d.]*)", text)
    return match.group(1) if match else None


def wheel_for(torch, works):
    """Return the pip command for this torch version built for the newest CUDA release that
    works(cuda_version) (torch's own table of its release builds, torch/cuda/__init__.py),
    or None."""
    import platform as _platform

    try:
        from torch.cuda import PYTORCH_RELEASES_CODE_CC
    except ImportError:  # a torch older than this table (a GPU image's own)
        return None
    base = torch.__version__.split("+")[0]
    arch = "aarch64" if _platform.machine().lower() == "aarch64" else "x86_64"
    for cuda in sorted(
        PYTORCH_RELEASES_CODE_CC, key=lambda v: tuple(map(int, v.split("."))), reverse=True
    ):
        if works(cuda, PYTORCH_RELEASES_CODE_CC[cuda].get(arch, set())):
            return (
                f"pip install torch=={base} --index-url "
                f"https://download.pytorch.org/whl/cu{cuda.replace('.', '')}"
            )
    return None


def gpu_problem(torch, version_file="/proc/driver/nvidia/version"):
    """Return None if this torch can use every NVIDIA GPU it counts (or there is none), else
    one line saying why not and what to install. Three ways it cannot, each of which would
    otherwise be a crash deep in a step or a silent run on the CPU:
    - a CPU build of torch on a machine with an NVIDIA driver;
    - a driver too old for the build's CUDA: NVML counts the GPUs, CUDA does not start
      (torch.cuda.device_count() > 0, torch.cuda.is_available() False);
    - a GPU whose architecture the build has no kernels for (a P100 or V100 under the CUDA 13
      build): torch's own table of which code runs on which compute capability decides."""
    base = torch.__version__.split("+")[0]
    driver = nvidia_driver(version_file)
    if torch.version.cuda is None:
        if driver and not torch.version.hip:
            return (
                f"an NVIDIA driver ({driver}) is here, but torch {torch.__version__} is a "
                f"CPU build; for the GPU: pip install torch=={base} (on Linux, PyPI's "
                "build for CUDA 13.0)"
            )
        return None
    counted = torch.cuda.device_count()
    if counted == 0:
        return None
    if not torch.cuda.is_available():
        cuda = torch.version.cuda
        need = MIN_DRIVER.get(int(cuda.split(".")[0]))
        found = int(driver.split(".")[0]) if driver else None
        fix = wheel_for(
            torch,
            lambda c, _: found is not None and MIN_DRIVER.get(int(c.split(".")[0]), 10**6) <= found,
        )
        return (
            f"torch {torch.__version__} counts {counted} GPU{'s' if counted > 1 else ''} but "
            f"CUDA {cuda} cannot start on them: the NVIDIA driver ({driver or 'unknown'}) is "
            f"older than CUDA {cuda} needs ({need or 'see NVIDIA'} or newer); update the "
            f"driver{', or: ' + fix if fix else ''}"
        )
    try:
        from torch.cuda import _code_compatible_with_device
    except ImportError:  # a torch older than that table: same major version, minor not above

        def _code_compatible_with_device(device_cc, code_cc):
            return device_cc // 10 == code_cc // 10 and device_cc % 10 >= code_cc % 10

    built = [
        int(arch.split("_")[1].rstrip("af"))
        for arch in torch.cuda.get_arch_list()
        if arch.startswith("sm_")
    ]
    for index in range(counted):
        major, minor = torch.cuda.get_device_capability(index)
        device_cc = 10 * major + minor
        if built and not any(_code_compatible_with_device(device_cc, cc) for cc in built):
            fix = wheel_for(
                torch,
                lambda _, ccs: any(_code_compatible_with_device(device_cc, cc) for cc in ccs),  # noqa: B023
            )
            return (
                f"GPU {index} ({torch.cuda.get_device_name(index)}, compute capability "
                f"{major}.{minor}) has no kernels in torch {torch.__version__} (built for "
                f"{' '.join(torch.cuda.get_arch_list())}): a step on it would stop with 'no "
                "kernel image is available'; "
                + (
                    f"install a build that has them: {fix}"
                    if fix
                    else "no build of this torch has them; see https://pytorch.org/get-started/"
                )
            )
    return None
