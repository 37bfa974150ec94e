"""How the studio is served on loopback: the demo's web server, and the tests' (no Django here)."""


def studio_command(python: str, port: int) -> list[str]:
    """Return the command serving the studio under uvicorn on loopback, with nothing in front.

    uvicorn takes a request's `X-Forwarded-For` as its client's address when it comes from
    127.0.0.1, unless told not to: any local client could then choose the address the
    sign-in limit counts (found by a review: 30 wrong passwords, none refused). Its HTTP
    protocol bounds the time a request's head may take and the connections open at once
    (`avatars/heads.py`).
    """
    return [
        python,
        "-m",
        "uvicorn",
        "avatars.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-proxy-headers",
        "--http",
        "avatars.heads:TimedHeads",
        # Accepted at once before any is refused: kept well under the descriptors left.
        "--backlog",
        "128",
        # A stop waits this long for answers under way, not for a client that never reads.
        "--timeout-graceful-shutdown",
        "30",
        "--log-level",
        "warning",
    ]
