"""`InputChecker.on_cuda` with the emulated B200: CPU tensors are the emulated GPU's memory while it is active (for
kernels with an sm_100a path), and a clear error otherwise. No kernel runs here."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bwtriton.emu.driver import active_driver, emulated_gpu  # noqa: E402
from bwtriton.errors import InputError  # noqa: E402
from bwtriton.kernels._validate import InputChecker  # noqa: E402

pytestmark = [pytest.mark.emulated,
              pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU machine's behaviour (no CUDA)")]
check = InputChecker("demo_op")


def test_cpu_tensors_refused_without_the_emulator_with_both_fixes():
    assert active_driver() is None
    with pytest.raises(InputError, match=r"demo_op: a is on device 'cpu', but this kernel runs on a CUDA GPU; "
                                         r"move it with a.cuda\(\) \(a hint; or run it on the CPU as a Blackwell "
                                         r"GPU: `with bwtriton.emu.emulated_gpu\(\"sm_100a\"\)"):
        check.on_cuda({"a": torch.ones(2)}, hint="a hint")


def test_cpu_tensors_accepted_on_the_emulated_b200():
    with emulated_gpu("sm_100a"):
        assert check.on_cuda({"a": torch.ones(2), "b": None, "c": torch.zeros(3)}) == torch.device("cpu")
    with pytest.raises(InputError, match="runs on a CUDA GPU"):  # and refused again once it is off
        check.on_cuda({"a": torch.ones(2)})


def test_kernel_without_an_sm100_path_says_so_on_the_emulator():
    with emulated_gpu("sm_100a"):
        with pytest.raises(InputError, match="CPU tensor on the emulated sm_100a, but this kernel has no sm_100a "
                                             "path"):
            check.on_cuda({"a": torch.ones(2)}, emulable=False)


def test_meta_tensors_still_refused_on_the_emulator():
    with emulated_gpu("sm_100a"):
        with pytest.raises(InputError, match="a is on device 'meta'"):
            check.on_cuda({"a": torch.empty(2, device="meta")})


def test_launch_helpers_see_one_emulated_device():
    """`with torch.cuda.device(x.device)` and the raw stream query that bwtriton's launchers use are no-ops on
    the emulated device 0, refused for others, and gone again afterwards."""
    with emulated_gpu("sm_100a"):
        with torch.cuda.device(torch.device("cpu")), torch.cuda.device(0):
            assert torch._C._cuda_getCurrentRawStream(None) == 0
            assert torch.cuda.is_current_stream_capturing() is False
        with pytest.raises(InputError, match="no device cuda:1"):
            torch.cuda.device("cuda:1")
    assert not hasattr(torch._C, "_cuda_getCurrentRawStream")
    with pytest.raises(ValueError):
        torch.cuda.device(torch.device("cpu"))
