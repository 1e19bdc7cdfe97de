# Sourced by the scripts in tools/ (from the clone's root): the Python environment dldoctor is
# installed into. The active virtual environment ($VIRTUAL_ENV) when there is one, else the
# clone's own .venv (tools/install makes it). Sets VENV, PY, OWN (1: the clone's .venv) and
# BUILD_DIR (the CMake build, one per environment, so switching keeps each build incremental).
OWN_VENV="$PWD/.venv"
if [ -n "${VIRTUAL_ENV:-}" ] && [ "$(realpath -m "$VIRTUAL_ENV")" != "$(realpath -m "$OWN_VENV")" ]; then
  VENV=$(realpath -m "$VIRTUAL_ENV")
  OWN=0
  BUILD_DIR=build/py-$(basename "$VENV")-$(printf %s "$VENV" | sha1sum | cut -c1-8)
else
  VENV=$OWN_VENV
  OWN=1
  BUILD_DIR=build/py
fi
PY=$VENV/bin/python
# How to name the environment to the user: relative inside the clone.
if [ $OWN = 1 ]; then VENV_SHOWN=.venv; else VENV_SHOWN=$VENV; fi
