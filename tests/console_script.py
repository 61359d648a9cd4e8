"""The real ``kb`` console script (e2e/test_console_script.py, search/test_fields.py).

The ``kb`` used is, in order: ``$KB_EXE``; the one installed beside this Python (CI installs the
package); else a throwaway virtual environment made once per session that sees this Python's
packages and gets this checkout installed (``pip install -e --no-deps``) so the
``[project.scripts]`` entry point itself is exercised."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _site_packages() -> list[str]:
    import site

    return [p for p in site.getsitepackages() if Path(p).is_dir()]


def _build_venv(base: Path) -> Path:
    """A venv seeing this interpreter's packages, with this checkout installed editable."""
    stage = base / "stage"
    stage.mkdir()
    shutil.copy(ROOT / "pyproject.toml", stage / "pyproject.toml")
    (stage / "src").symlink_to(ROOT / "src", target_is_directory=True)
    readme = ROOT / "README.md"
    (stage / "README.md").write_text(readme.read_text() if readme.exists() else "kbcli\n")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "_kbcli_test_parent.pth").write_text("\n".join(_site_packages()) + "\n")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(stage)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        pytest.skip(f"could not install kbcli into a test venv: {tail}")
    return venv / "bin" / "kb"


@pytest.fixture(scope="session")
def kb_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("KB_EXE"):
        return Path(os.environ["KB_EXE"])
    beside = Path(sys.executable).parent / "kb"
    if beside.exists():
        return beside
    return _build_venv(tmp_path_factory.mktemp("kb-entrypoint"))


def kb(kb_exe: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(kb_exe), *args], capture_output=True, text=True, timeout=300, **kwargs
    )
