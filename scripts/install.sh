#!/usr/bin/env bash
# Install napari-shardscope into ./.venv (./.venv-pyqt5 for the PyQt5 modes) on a fresh Debian/Ubuntu machine.
#
#   bash scripts/install.sh             # the library, CLI and napari with its default binding (PyQt6) in .venv: [all]
#   bash scripts/install.sh test        # the same plus the test tools and cross-check libraries: extra [test]
#   bash scripts/install.sh pyqt6       # the same as the default, under the extra's old name [pyqt6]
#   bash scripts/install.sh test-pyqt5  # the test environment under PyQt5 instead, in .venv-pyqt5: [test-pyqt5]
#   bash scripts/install.sh pyqt5       # the library, CLI and napari (PyQt5) in .venv-pyqt5: extra [pyqt5]
#   bash scripts/install.sh bench       # the test environment plus the bench peers and nginx: extra [bench]
#   bash scripts/install.sh notebook    # the library, CLI and napari (PyQt6) plus JupyterLab, nbconvert and an
#                                       # ipykernel, to run examples/proofreading.ipynb: extra [notebook]
#
# INSTALL_DRY_RUN=1 prints what a mode would install (venv, extra, system packages) and installs nothing.
# One Qt binding per environment: the PyQt5 modes use their own venv, so no environment holds two bindings.
#
# System packages: Xvfb and the X/OpenGL libraries Qt needs to draw (napari renders through OpenGL;
# without the xcb libraries Qt aborts the process). Only missing packages are installed.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-all}"
modes="all test test-pyqt5 pyqt5 pyqt6 bench notebook"
case " $modes " in
  *" $extra "*) ;;
  *) echo "install.sh: unknown mode '$extra'; modes: $modes" >&2; exit 2 ;;
esac
case "$extra" in
  pyqt5|test-pyqt5) venv=.venv-pyqt5 ;;
  *) venv=.venv ;;
esac

apt_packages=(xvfb xauth libgl1 libegl1 libgl1-mesa-dri libglib2.0-0 libfontconfig1 libdbus-1-3
  libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0
  libxcb-render-util0 libxcb-shape0 libxcb-xfixes0 libxcb-xinerama0 libxcb-xkb1)
# The Neuroglancer hand-off test drives Debian's chromium through Playwright (never `playwright install`);
# only the main test lane runs it (.venv-pyqt5's lane runs the Qt tests).
case "$extra" in
  test) apt_packages+=(chromium) ;;
esac
# bench/locate.py measures remote inspect against Debian's nginx on 127.0.0.1 (CI runs no bench).
case "$extra" in
  bench) apt_packages+=(nginx-light) ;;
esac

if [ "${INSTALL_DRY_RUN:-0}" = "1" ]; then
  echo "install.sh: mode $extra: would install -e .[$extra] into $venv; system packages: ${apt_packages[*]}"
  exit 0
fi

if command -v dpkg >/dev/null 2>&1; then
  missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "install.sh: installing system packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends --no-upgrade "${missing[@]}"
  fi
else
  echo "install.sh: not a Debian system; install Xvfb and the X11/OpenGL libraries Qt needs yourself" >&2
fi

python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "install.sh: Python 3.11 or newer is needed ($python is $("$python" --version 2>&1))" >&2; exit 2; }

if ! command -v uv >/dev/null 2>&1; then
  "$python" -m pip install -q uv >/dev/null 2>&1 || true
fi
if command -v uv >/dev/null 2>&1 || "$python" -m uv --version >/dev/null 2>&1; then
  uv_cmd=(uv); command -v uv >/dev/null 2>&1 || uv_cmd=("$python" -m uv)
  [ -x "$venv/bin/python" ] || "${uv_cmd[@]}" venv -q -p "$python" "$venv"
  # --compile-bytecode: the environment's modules are compiled once here, as pip does by default (uv does
  # not): otherwise the first start of napari or `shardscope` compiles them, and a harness that forbids
  # writing bytecode (PYTHONDONTWRITEBYTECODE) makes every start compile them again.
  "${uv_cmd[@]}" pip install -q --compile-bytecode -p "$venv/bin/python" -e ".[$extra]"
else
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e ".[$extra]"
fi
echo "install.sh: ready: $venv/bin/shardscope ($("$venv/bin/python" -c 'import napari_shardscope as m; print(m.__version__)'))"
