"""Package discovery: everything under python/. `bwtriton.passes` is python/bwtriton/passes, a link to lib_passes/
(the layout keeps the passes visibly apart from the user-facing package; wheels get real files)."""
from setuptools import find_packages, setup

setup(packages=find_packages("python"), package_dir={"": "python"})
