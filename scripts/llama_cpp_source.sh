# Sourced by build_native.sh and build_exact_kernels.sh: the llama.cpp source of the installed
# llama-cpp-python (vendor/llama.cpp inside its sdist from PyPI), at the very same version, so what
# is built here runs the kernels llama-cpp-python runs.
#
# In:  GGUFSPEC_NATIVE_DIR (default ~/.cache/ggufspec/native), LLAMA_CPP_PYTHON_VERSION (default:
#      the installed one), SDIST (a downloaded sdist, optional).
# Out: VERSION, DIR, SRC (the llama.cpp source tree).

DIR="${GGUFSPEC_NATIVE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ggufspec/native}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-$(python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)}"
if [[ -z "$VERSION" ]]; then
  echo "error: llama-cpp-python is not installed here; activate the venv or set LLAMA_CPP_PYTHON_VERSION" >&2
  exit 2
fi

mkdir -p "$DIR/src"
SDIST="${SDIST:-$DIR/src/llama_cpp_python-$VERSION.tar.gz}"
if [[ ! -f "$SDIST" ]]; then
  echo "downloading the llama-cpp-python $VERSION sdist (llama.cpp source is vendored inside)"
  python -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps -q -d "$DIR/src"
fi

SRC="$DIR/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  echo "extracting $SDIST"
  tar xzf "$SDIST" -C "$DIR/src" "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if ! command -v cmake >/dev/null; then
  echo "cmake not found: installing it from PyPI into this environment"
  python -m pip install -q cmake
fi
