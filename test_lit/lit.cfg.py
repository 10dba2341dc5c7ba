# lit configuration for bwtriton: each test's RUN lines drive the `bwtriton` CLI (as %bwtriton, with the same
# Python that runs lit) and check its output with FileCheck (the `filecheck` PyPI port).
import os
import shutil
import sys

import lit.formats

config.name = "bwtriton"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ttir", ".ttgir", ".mlir", ".ptx", ".ll", ".py", ".test"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.environ.get("BWTRITON_LIT_OUT", os.path.join(config.test_source_root, "Output")))

python = sys.executable
filecheck = shutil.which("filecheck") or shutil.which("FileCheck")
if filecheck is None:
    lit_config.fatal("FileCheck not found: pip install filecheck")
kernels = os.path.join(os.path.dirname(config.test_source_root), "python", "bwtriton", "examples")
config.substitutions.append(("%bwtriton", f"{python} -m bwtriton"))
# triton-opt's command line (docs/regression_testing.md): upstream-style lit files use %triton-opt.
config.substitutions.append(("%triton-opt", f"{python} -m bwtriton.opt"))
config.substitutions.append(("%python", python))
config.substitutions.append(("%kernels", kernels))
config.substitutions.append(("FileCheck", filecheck))
# Keep Triton quiet and deterministic inside tests, but compile for real (no cross-test cache surprises).
for var in ("HOME", "TRITON_CACHE_DIR", "PATH", "PYTHONPATH", "BWTRITON_PASSES", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# The Triton release under test, for `REQUIRES: triton-3.9` / `UNSUPPORTED: triton-3.6` lines where a release's
# output differs (bwtriton.compat is the one place that reads the version).
from bwtriton.compat.versions import installed as _triton_version  # noqa: E402

config.available_features.add("triton-{}.{}".format(*_triton_version()[:2]))
