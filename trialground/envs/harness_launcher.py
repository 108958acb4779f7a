"""The program that starts a harness episode inside the sandbox (standard library only; it runs with
the sandbox's Python, before and beside the user's program).

It listens on the sandbox's own loopback (`127.0.0.1`, a free port), relays every connection to the
gateway's unix socket (shown read-only in the sandbox), sets `OPENAI_BASE_URL` to that address plus the
episode's base path, then runs the harness command in the workspace, the prompt on its standard input,
and exits with its status (128 + N for a signal). Everything it starts lives in the sandbox's PID
namespace and dies with the command.

The command runs with bash, or, when the launch holds a "python" plan (`harness.python_plan`: the
command is a plain `python ...` of the harness virtualenv, and `env.harness_preload` is set), in a fork
of this very interpreter, which the sandbox's supervisor started with the preloaded modules imported:
sys.argv, sys.path (script directory or working directory, PYTHONPATH, the standard library, the
virtualenv's site-packages with their .pth files), sys.prefix and sys.executable are set as the
virtualenv's interpreter sets them, and the program runs as `__main__` through runpy.
"""

LAUNCHER = r"""
import asyncio, json, os, socket, sys

cfg = json.loads(sys.argv[1])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)
base_url = "http://127.0.0.1:%d%s" % (listener.getsockname()[1], cfg["path"])

def exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

def run_in_this_interpreter(plan):
    os.environ.pop("TRIALGROUND_PRELOADED", None)
    os.environ["OPENAI_BASE_URL"] = base_url
    os.environ.update(plan["env"])
    os.chdir(cfg["cwd"])
    flags, mode, target = set(plan["flags"]), plan["mode"], plan["target"]
    head = []
    if "I" not in flags:
        script_dir = os.path.dirname(os.path.abspath(target)) if mode == "f" else ""
        head.append(os.getcwd() if mode == "m" else script_dir)
    if not {"I", "E"} & flags and os.environ.get("PYTHONPATH"):
        head += os.environ["PYTHONPATH"].split(":")
    sys.path[:0] = head
    sys.prefix = sys.exec_prefix = plan["prefix"]
    sys.executable = plan["executable"]
    sys.argv = plan["argv"]
    if "S" not in flags:
        import site
        for directory in plan["site"]:
            site.addsitedir(directory)
    if "B" in flags:
        sys.dont_write_bytecode = True
    if "u" in flags or (os.environ.get("PYTHONUNBUFFERED") and not {"I", "E"} & flags):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)
    code = 0
    try:
        import runpy
        if mode == "m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif mode == "f":
            runpy.run_path(target, run_name="__main__")
        else:
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            exec(compile(target, "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = code or 120
    os._exit(code)

async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass

async def relay(reader, writer):
    try:
        up_r, up_w = await asyncio.open_unix_connection(cfg["socket"])
    except OSError:
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

async def run_with_bash():
    env = dict(os.environ)
    env["OPENAI_BASE_URL"] = base_url
    prompt = sys.stdin.buffer.read()
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", cfg["command"], stdin=asyncio.subprocess.PIPE, env=env, cwd=cfg["cwd"]
    )
    try:
        proc.stdin.write(prompt)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass
    return await proc.wait()

async def main(pid):
    server = await asyncio.start_server(relay, sock=listener)
    if pid is None:
        code = await run_with_bash()
    else:
        status = (await asyncio.get_running_loop().run_in_executor(None, os.waitpid, pid, 0))[1]
        code = os.waitstatus_to_exitcode(status)
    server.close()
    return code if code >= 0 else 128 - code

pid = None
if cfg.get("python") is not None:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        run_in_this_interpreter(cfg["python"])
sys.exit(asyncio.run(main(pid)))
"""
