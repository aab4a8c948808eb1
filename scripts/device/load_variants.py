"""Which part of ggufspec's load crashes on CUDA: each combination in its own process."""
import signal, subprocess, sys, time
MODEL = sys.argv[1]
PATCH = {
    "none": "",
    "noprog": """
from ggufspec.llama import lib
def load_model(path, params):
    lib.ensure_init(); params.use_extra_bufts = params.use_extra_bufts and lib.repack()
    return lib.llama.llama_model_load_from_file(str(path).encode(), params)
lib.load_model = load_model
import ggufspec.llama.model as M; M.lib.load_model = load_model
""",
    "nolog": """
from ggufspec.llama import lib
def ensure_init():
    if not lib._initialised:
        lib.llama.llama_backend_init(); lib._initialised = True
lib.ensure_init = ensure_init
""",
    "local": "import ctypes; ctypes.RTLD_GLOBAL = 0\n",
    "mmap": """
from ggufspec.llama import lib
orig = lib.load_model
def load_model(path, params):
    params.load_mode = lib.llama.LLAMA_LOAD_MODE_MMAP; return orig(path, params)
lib.load_model = load_model
""",
    "verbose": "from ggufspec.llama import lib; lib.set_verbose(True)\n",
}
LOAD = """
from ggufspec.llama.model import Model
from ggufspec.settings import ModelSettings
m = Model(MODEL, settings=ModelSettings(n_gpu_layers=99)); print("n_vocab", m.n_vocab)
"""
LIST = "from ggufspec.llama import devices; print([d.name for d in devices.list_devices()])\n"
RUN = """
import sys
from ggufspec.cli import main
sys.argv = ["ggufspec", "run", "--target", MODEL, "--draft", MODEL2, "-p", "hello world", "-n", "24", "--compare", "--repeats", "1"]
main()
"""

def step(name, code, timeout=40):
    """Runs `code` in a fresh process; returns True when it exited 0."""
    t = time.time()
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", f"MODEL={MODEL!r}\nMODEL2={MODEL.replace('tiny', 'tiny2')!r}\n" + code],
                       capture_output=True, text=True, timeout=timeout)
    rc = p.returncode
    what = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"rc={rc}"
    out = [x for x in (p.stdout + p.stderr).splitlines() if x.strip() and not x.startswith(("ggml_cuda_init", "  Device 0"))]
    print(f"== {name}: {what} ({time.time() - t:.1f} s)")
    for x in out[-(14 if rc else 3):]:
        print("   ", x[:300])
    sys.stdout.flush()
    return rc == 0

for patch in ("none", "noprog", "nolog", "local", "mmap"):
    step(f"load, {patch}", PATCH[patch] + LOAD)
    step(f"list+load, {patch}", PATCH[patch] + LIST + LOAD)
step("list+load, verbose", PATCH["verbose"] + LIST + LOAD)
chosen = None
for patch in ("none", "noprog", "nolog", "local", "mmap"):
    if step(f"run --compare, {patch}", PATCH[patch] + RUN, timeout=60) and chosen is None:
        chosen = patch
if chosen is None:  # two at once
    if step("run --compare, noprog+nolog", PATCH["noprog"] + PATCH["nolog"] + RUN, timeout=60):
        chosen = "noprog+nolog"
print("chosen patch:", chosen)
code = "".join(PATCH[p] for p in (chosen or "none").split("+"))
open("/tmp/keep/patch.py", "w").write(code)
