"""Field guide cause 4, network flavour: __getitem__ reads each sample from a slow server.

A local TCP server answers each request after a delay (as a remote store would); workers
wait off-CPU. Healthy twin (`--healthy`): the server answers at once.
"""

import socket
import socketserver
import threading
import time

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

DELAY_S = 0.03
PAYLOAD = 4096


class Handler(socketserver.BaseRequestHandler):
    delay = DELAY_S

    def handle(self):
        while self.request.recv(16):
            time.sleep(self.delay)
            self.request.sendall(b"x" * PAYLOAD)


class Remote(Dataset):
    def __init__(self, port):
        self.port = port
        self.conn = None

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        if self.conn is None:  # one connection per worker process
            self.conn = socket.create_connection(("127.0.0.1", self.port))
        self.conn.sendall(b"get\n")
        got = b""
        while len(got) < PAYLOAD:
            got += self.conn.recv(PAYLOAD - len(got))
        return torch.frombuffer(bytearray(got), dtype=torch.uint8).float()

    def __getstate__(self):
        return {"port": self.port, "conn": None}


def main():
    args = parser(__doc__).parse_args()
    Handler.delay = 0.0 if args.healthy else DELAY_S
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    loader = DataLoader(Remote(server.server_address[1]), batch_size=4, num_workers=1)
    print("batches:", consume(loader, args.seconds))
    server.shutdown()


if __name__ == "__main__":
    main()
