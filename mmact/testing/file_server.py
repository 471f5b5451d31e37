"""An HTTP server on 127.0.0.1 for tests of checkpoint downloads."""
import contextlib
import http.server
import os
import os.path as osp
import threading
from functools import partial
from typing import Iterator, Union

__all__ = ['serve_files', 'TRUNCATED']

#: URL folder whose files are sent cut short: the full ``Content-Length``,
#: then half the bytes and a closed connection (a download cut short).
TRUNCATED = 'truncated'


class _Handler(http.server.SimpleHTTPRequestHandler):

    def do_GET(self) -> None:
        prefix = f'/{TRUNCATED}/'
        if not self.path.startswith(prefix):
            return super().do_GET()
        path = osp.join(self.directory, self.path[len(prefix):])
        if not osp.isfile(path):
            return self.send_error(404)
        with open(path, 'rb') as file:
            data = file.read()
        self.send_response(200)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.close_connection = True

    def log_message(self, *args) -> None:
        pass  # keep the tests' output to their own


@contextlib.contextmanager
def serve_files(root: Union[str, os.PathLike]) -> Iterator[str]:
    """Serve the files of ``root`` over HTTP while the context is open.

    Args:
        root: The folder served.

    Yields:
        str: The base URL, ``http://127.0.0.1:PORT``.
    """
    server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{server.server_address[1]}'
    finally:
        server.shutdown()
        server.server_close()
