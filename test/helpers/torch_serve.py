#!/usr/bin/python3
"""torch_serve.py — one PyTorch start-up for all of a test's calls of a helper.

  /usr/bin/python3 torch_serve.py HELPER.py DIR

Imports HELPER.py (hf_llama.py, hf_gpt2.py ...: PyTorch's 2-4 s start-up paid
once), writes DIR/ready, then serves calls until the line "stop" or until its
parent (the test) is gone: DIR/queue is a FIFO of call names; for a name N,
DIR/N.req holds the helper's command line (its words, each ended by a NUL);
the helper's main() runs with those words as sys.argv[1:], its stdout into
DIR/N.out, its stderr into DIR/N.err, its exit status last into DIR/N.rc
(written whole: the caller waits for that file). Exits 3 when HELPER.py
cannot be imported (no torch): DIR/import.err says why.
Used by test/helpers/torch_serve.bash. Every helper seeds what it draws
(--seed), so a call gives what the helper run alone gives.
"""
import contextlib
import importlib.util
import os
import select
import sys
import traceback


def main():
    helper, d = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(helper)))
    try:
        spec = importlib.util.spec_from_file_location("helper_" + os.path.basename(helper)[:-3], helper)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except BaseException:  # noqa: B902 - an import error of any kind is the skip
        with open(os.path.join(d, "import.err"), "w") as f:
            traceback.print_exc(file=f)
        sys.exit(3)
    open(os.path.join(d, "ready"), "w").close()
    parent = os.getppid()
    # read and write: the FIFO never reports end-of-file between callers
    fd = os.open(os.path.join(d, "queue"), os.O_RDWR)
    buf = b""
    while os.getppid() == parent:  # the test gone (its server reparented): done
        if not select.select([fd], [], [], 1.0)[0]:
            continue
        buf += os.read(fd, 4096)
        while b"\n" in buf:
            name, buf = buf.split(b"\n", 1)
            if name == b"stop":
                return
            serve(mod, helper, os.path.join(d, name.decode()))


def serve(mod, helper, base):
    with open(base + ".req", "rb") as f:
        words = [w.decode() for w in f.read().split(b"\0")[:-1]]
    rc = 0
    with open(base + ".out", "w") as out, open(base + ".err", "w") as err:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            sys.argv = [helper] + words
            try:
                mod.main()
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)
            except BaseException:  # noqa: B902 - the call fails, the server goes on
                traceback.print_exc()
                rc = 1
    with open(base + ".rc.tmp", "w") as f:
        f.write(f"{rc}\n")
    os.rename(base + ".rc.tmp", base + ".rc")

if __name__ == "__main__":
    main()
