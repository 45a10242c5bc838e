"""Packaging: everything is declared in pyproject.toml except one step that setuptools cannot
declare. The repository keeps sql/, templates/, static/ and examples/ at the top level, outside
the package; a wheel installs only packages, so the build copies those folders into the built
package as admin_app/_bundled/<folder>, where admin_app/resources.py finds them once installed.
MANIFEST.in puts the same folders in the sdist, so a wheel built from the sdist gets them too.
"""
from __future__ import annotations

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The one list of shipped folders; read from the file, as the package's imports are not
# installed in an isolated build environment.
FOLDERS = runpy.run_path(str(ROOT / "admin_app" / "resources.py"))["FOLDERS"]
IGNORE = shutil.ignore_patterns("__pycache__", "*.py[co]", ".*")


class build_py_with_folders(build_py):
    def run(self):
        super().run()
        # An editable install reads the checkout's folders directly.
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "admin_app" / "_bundled"
        # Start from nothing each time: pip builds in place, and a file deleted from the
        # checkout must not live on in build/ and ship in the next wheel.
        shutil.rmtree(target, ignore_errors=True)
        for name in FOLDERS:
            source = ROOT / name
            if not source.is_dir():
                raise SystemExit(f"cannot build: the {name}/ folder is missing")
            shutil.copytree(source, target / name, ignore=IGNORE)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        target = Path(self.build_lib) / "admin_app" / "_bundled"
        return outputs + [str(p) for p in target.rglob("*") if p.is_file()]


setup(cmdclass={"build_py": build_py_with_folders})
