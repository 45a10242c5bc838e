"""Where the hub's data folders are: migrations (sql/), console pages (templates/), their assets
(static/) and the example configuration (examples/).

In the repository they are top-level folders beside the package. A built wheel carries copies
of them in `admin_app/_bundled/` (setup.py puts them there), because a wheel installs only
packages. The bundled copy exists only in a built package, so when it is there it is the one to
use; otherwise this is a checkout or an editable install, which reads the checkout's folders.
"""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_ROOT = PACKAGE_DIR.parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"

# The folders shipped in the wheel; setup.py reads this list too.
FOLDERS = ("sql", "templates", "static", "examples")


def folder(name: str) -> Path:
    """The absolute path of one of FOLDERS."""
    if name not in FOLDERS:
        raise ValueError(f"unknown resource folder {name!r}")
    bundled = BUNDLED_DIR / name
    return bundled if bundled.is_dir() else CHECKOUT_ROOT / name


SQL_DIR = folder("sql")
TEMPLATES_DIR = folder("templates")
STATIC_DIR = folder("static")
EXAMPLES_DIR = folder("examples")
