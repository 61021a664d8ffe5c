"""`pip install ./python` works offline, into a fresh virtual environment.

The venv is made with --system-site-packages from this interpreter; when this
interpreter is itself a venv (the torch2 line), its site-packages are added by
a .pth file so torch, pip and setuptools stay visible. pip installs a copy of
python/ (an in-tree build would leave build/ and *.egg-info in the checkout)
with --no-deps --no-build-isolation --no-index: no network. Then the package
is imported from a directory outside the source tree, with PYTHONPATH unset.
"""
import os
import shutil
import site
import subprocess
import sys
import sysconfig

from tests import support


class Install(support.TempDirTest):
    def test_pip_install_into_a_venv_and_import_from_outside(self):
        venv = self.path("venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                       check=True, timeout=120)
        vpy = os.path.join(venv, "bin", "python")
        vsite = subprocess.run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
        parent = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]] if os.path.isdir(p)]
        with open(os.path.join(vsite, "_parent_interpreter.pth"), "w") as f:
            f.write("\n".join(parent) + "\n")
        src = self.path("src", "python")
        shutil.copytree(support.PYTHON_DIR, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build",
                                                                                "*.egg-info"))
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL", "PIP_FIND_LINKS")}
        clean["PIP_NO_INDEX"] = "1"
        clean["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        p = subprocess.run([vpy, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                            "--no-cache-dir", src], env=clean, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=300)
        self.assertOk(p, "pip install --no-deps --no-build-isolation ./python")
        outside = self.path("elsewhere")
        os.mkdir(outside)
        p = subprocess.run([vpy, "-c", "import anchor_pilot, torch; print(anchor_pilot.__file__); "
                                       "print(anchor_pilot.__version__)"],
                           cwd=outside, env=clean, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=120)
        self.assertOk(p, "import anchor_pilot")
        where, version = p.stdout.split()
        self.assertTrue(where.startswith(os.path.realpath(venv)) or where.startswith(venv), where)
        self.assertEqual(version, "0.1.0")
        self.assertFalse(where.startswith(support.PYTHON_DIR), where)
