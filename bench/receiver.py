"""A webhook receiver for the benchmark, on asyncio so that it is never the
bottleneck: keeps connections alive, answers every POST with 200 after
about a millisecond (``--delay MS``: after MS milliseconds; ``--hang``:
accepts and never answers), and counts what it got.

    python bench/receiver.py PORT [--hang] [--delay MS]

``GET /`` answers "<POSTs received> <distinct webhook-ids> <most POSTs
unanswered at once>".
"""
import asyncio
import sys

ANSWER_DELAY_SECONDS = 0.001
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Tally:
    posts = 0
    webhook_ids = set()
    unanswered = 0
    most_unanswered = 0


class Receiver(asyncio.Protocol):
    """One connection: reads requests by Content-Length and answers each."""

    def __init__(self, hang, delay):
        self.hang, self.delay = hang, delay
        self.buffer = b""

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name == "content-length":
                    length = int(value)
                elif name == "webhook-id":
                    Tally.webhook_ids.add(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length:]
            if head.startswith("get"):
                body = (f"{Tally.posts} {len(Tally.webhook_ids)} "
                        f"{Tally.most_unanswered}").encode()
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                     % (len(body), body))
                continue
            Tally.posts += 1
            Tally.unanswered += 1
            Tally.most_unanswered = max(Tally.most_unanswered, Tally.unanswered)
            if not self.hang:
                asyncio.get_running_loop().call_later(self.delay, self._answer)

    def _answer(self):
        Tally.unanswered -= 1
        if not self.transport.is_closing():
            self.transport.write(OK)


async def main(port, hang, delay):
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Receiver(hang, delay), "127.0.0.1", port,
                                      backlog=1024)
    await server.serve_forever()


if __name__ == "__main__":
    options = sys.argv[2:]
    delay = (float(options[options.index("--delay") + 1]) / 1000 if "--delay" in options
             else ANSWER_DELAY_SECONDS)
    asyncio.run(main(int(sys.argv[1]), "--hang" in options, delay))
