"""The network under Ember's connection pools, with httpcore's idle check made cheap.

Before each request is placed, and after each ends, httpcore asks every idle
kept-alive connection in the pool whether its socket is readable (a server that
closed an idle connection leaves it readable, and it must not be reused). Its
anyio stream answers by building a dict of every socket attribute, with a
`getpeername` call, to find the socket; with a pool of idle connections that was
a large share of the worker's CPU at many slots. These streams keep their socket
and answer with one poll(2). Everything else is anyio's, unchanged.
"""

# The `timeout` parameters are httpcore's interface, passed on as they come.
# ruff: noqa: ASYNC109

import select
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

SocketOption = (
    tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]
)


def readable(sock: socket.socket | None) -> bool:
    """Return whether a read on `sock` would not block (data, or the peer's close)."""
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Stream(httpcore.AsyncNetworkStream):
    """An anyio stream that keeps its socket for the idle check."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> "Stream":
        return Stream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return readable(self._socket)
        return self._inner.get_extra_info(info)


class Backend(httpcore.AsyncNetworkBackend):
    """anyio's network backend, handing out `Stream`s."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> Stream:
        return Stream(
            await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> Stream:
        return Stream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def install(client: httpx.AsyncClient) -> None:
    """Put the pool of `client`'s own transport (not one a test passed in) on `Backend`.

    httpx builds that pool and takes no backend for it; the pool keeps its backend in
    the one attribute it connects through (httpx and httpcore are pinned; the
    idle-check test in tests/test_ember_connections.py fails if this stops taking effect).
    """
    own = client._transport
    if isinstance(own, httpx.AsyncHTTPTransport):
        own._pool._network_backend = Backend()
