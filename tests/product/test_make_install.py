"""`make install` takes torch's CPU wheel from PyTorch's index where no GPU is listed, and pip's own
indexes, saying so, where that index cannot be reached (README, Install); then the package, then its
`dev` extra, which `make demo` goes without. A stub venv pip logs its calls."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import tomllib

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.integration

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# PYTHON for `make install`: `-m venv DIR` makes DIR/bin/python (this interpreter) and DIR/bin/pip, which
# appends its arguments to DIR/pip.log and fails with $PIP_INDEX_STATUS when given --index-url
STUB_PYTHON = """#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 99
mkdir -p "$3/bin"
ln -s "{python}" "$3/bin/python"
cat > "$3/bin/pip" <<'EOF'
#!/bin/sh
echo "$*" >> "$(dirname "$0")/../pip.log"
case "$*" in *--index-url*) exit "${{PIP_INDEX_STATUS:-0}}";; esac
EOF
chmod +x "$3/bin/pip"
"""


@pytest.fixture
def make_install(tmp_path):
    """Run `make install` into a stub venv: (pip calls, stderr)."""
    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON.format(python=sys.executable))
    stub.chmod(0o755)

    def run(*variables: str, target: str = "install", **env: str) -> tuple[list[str], str]:
        venv = tmp_path / f"venv{len(list(tmp_path.glob('venv*')))}"
        command = ["make", "-s", target, f"PYTHON={stub}", f"VENV={venv}", *variables]
        result = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, env={**os.environ, **env}, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return (venv / "pip.log").read_text().splitlines(), result.stderr

    return run


@pytest.fixture
def answering_url(tmp_path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{server.server_port}"
        server.shutdown()


def test_torch_comes_from_the_index_that_answers(make_install, answering_url):
    calls, stderr = make_install(f"TORCH_INDEX={answering_url}")
    assert calls == [
        f"install --quiet --index-url {answering_url} torch==2.13.0",
        "install --quiet -e .",
        "install --quiet -e .[dev]",
    ]
    assert "make install:" not in stderr


def test_an_index_that_cannot_be_reached_or_fails_falls_back_to_pips_own_saying_so(
    make_install, answering_url
):
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens there
    calls, stderr = make_install(f"TORCH_INDEX={closed}")
    assert calls == ["install --quiet torch==2.13.0", "install --quiet -e .", "install --quiet -e .[dev]"]
    assert f"make install: no torch==2.13.0 from {closed} (unreachable, or none for this Python)" in stderr
    calls, stderr = make_install(f"TORCH_INDEX={answering_url}", PIP_INDEX_STATUS="1")
    assert calls[:2] == [
        f"install --quiet --index-url {answering_url} torch==2.13.0",
        "install --quiet torch==2.13.0",
    ]
    assert f"make install: no torch==2.13.0 from {answering_url}" in stderr


def test_an_empty_torch_index_is_pips_own_without_a_note(make_install):
    calls, stderr = make_install("TORCH_INDEX=", "TORCH=torch==2.12.1")
    assert calls == ["install --quiet torch==2.12.1", "install --quiet -e .", "install --quiet -e .[dev]"]
    assert stderr == ""


def test_the_demo_installs_the_package_without_the_dev_extra(make_install, answering_url, tmp_path):
    calls, _ = make_install(f"TORCH_INDEX={answering_url}", target="install-package")
    assert calls == [f"install --quiet --index-url {answering_url} torch==2.13.0", "install --quiet -e ."]
    dry_run = ["make", "-n", "demo", f"VENV={tmp_path / 'fresh'}"]
    demo = subprocess.run(dry_run, cwd=REPO, capture_output=True, text=True, check=True)
    assert " -e ." in demo.stdout and "[dev]" not in demo.stdout


@pytest.mark.parametrize(("smi", "index"), [("exit 9", CPU_INDEX), ("echo 'GPU 0: NVIDIA H100'", "")])
def test_the_default_index_is_the_cpu_one_where_nvidia_smi_lists_no_gpu(tmp_path, smi, index):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{smi}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    probe = ["make", "-s", "--eval", "torch-index: ; @echo '$(TORCH_INDEX)'", "torch-index"]
    result = subprocess.run(probe, cwd=REPO, capture_output=True, text=True, env=env, check=True)
    assert result.stdout == f"{index}\n"


def test_the_readme_opens_with_the_cpu_index_and_each_routes_size_as_does_the_pypi_description():
    opening = (REPO / "README.md").read_text().split("\n## ")[0]
    assert CPU_INDEX in opening and "2.7 GB" in opening and "0.19 GB" in opening
    description = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["description"]
    assert CPU_INDEX in description
