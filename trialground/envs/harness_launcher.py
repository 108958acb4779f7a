"""The program that starts a harness episode inside the sandbox (standard library only; it runs with
the sandbox's Python, before and beside the user's program).

It listens on the sandbox's own loopback (`127.0.0.1`, a free port), relays every connection to the
gateway's unix socket (shown read-only in the sandbox), sets `OPENAI_BASE_URL` to that address plus the
episode's base path, then runs the harness command with bash in the workspace, the prompt on its standard
input, and exits with its status (128 + N for a signal). Everything it starts lives in the sandbox's PID
namespace and dies with the command.
"""

LAUNCHER = r"""
import asyncio, json, os, signal, sys

cfg = json.loads(sys.argv[1])

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

async def main():
    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = dict(os.environ)
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:%d%s" % (port, cfg["path"])
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
    code = await proc.wait()
    server.close()
    return code if code >= 0 else 128 - code

sys.exit(asyncio.run(main()))
"""
