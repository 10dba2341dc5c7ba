"""Package discovery: python/bwtriton/** plus lib_passes/ installed as bwtriton.passes."""
from setuptools import find_packages, setup

packages = find_packages("python") + ["bwtriton.passes"]
package_dir = {"": "python", "bwtriton.passes": "lib_passes"}
setup(packages=packages, package_dir=package_dir)
