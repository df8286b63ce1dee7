"""A gRPC client over the `h2` library (PyPI), for the tests that need HTTP/2 as it is on the
wire: free-form headers and bodies, a flow-control window of their choosing, and the response
as the server sent it. Run under the tools venv (venv_main), which has `h2`."""
import socket
import struct
import time


def grpc_message(payload, compressed=False, length=None):
    return struct.pack(">BI", 1 if compressed else 0,
                       len(payload) if length is None else length) + payload


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


def field(number, data):  # A length-delimited protobuf field (field numbers < 16).
    return bytes([number << 3 | 2]) + varint(len(data)) + data


def put_request(key, value):
    return field(1, key) + field(2, value)


class Call:
    """One gRPC call over the `h2` library on a connection of its own: free-form headers and
    body, and the response's headers, messages and trailers as the server sent them."""

    def __init__(self, address, path, body=b"", headers=(), method="POST",
                 content_type="application/grpc", end=True, window=None):
        import h2.config
        import h2.connection
        import h2.settings
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.stream = self.conn.get_next_available_stream_id()
        request = [(":method", method), (":scheme", "http"), (":path", path),
                   (":authority", address), ("te", "trailers")]
        if content_type is not None:
            request.append(("content-type", content_type))
        self.headers, self.trailers, self.data, self.reset = {}, {}, b"", None
        self.ended = False
        self.conn.send_headers(self.stream, request + list(headers),
                               end_stream=end and not body)
        self.flush()
        if body:
            self.send(body, end=end)

    def flush(self):
        self.sock.sendall(self.conn.data_to_send())

    def send(self, body, end=False, seconds=30.0):
        """Sends `body` in frames of the size the server allows, as far as the flow-control
        windows let it: past them, it reads for the server's WINDOW_UPDATEs (keeping what else
        it sends for wait), for up to `seconds`. It stops where the stream ends first (the
        server refused the call)."""
        import h2.exceptions
        deadline = time.time() + seconds
        at = 0
        while not self.ended:
            room = min(self.conn.local_flow_control_window(self.stream),
                       self.conn.max_outbound_frame_size, len(body) - at)
            if room > 0 or at == len(body):
                try:
                    self.conn.send_data(self.stream, body[at:at + room],
                                        end_stream=end and at + room == len(body))
                except h2.exceptions.StreamClosedError:
                    break
                at += room
                self.flush()
                if at == len(body):
                    break
                continue
            if time.time() > deadline:
                raise TimeoutError(f"sent {at} of {len(body)} bytes: the window stayed shut")
            self.sock.settimeout(max(deadline - time.time(), 0.01))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                raise TimeoutError(f"sent {at} of {len(body)} bytes: the window stayed shut")
            if not chunk:
                break
            self.receive(chunk)

    def cancel(self):
        self.conn.reset_stream(self.stream)
        self.flush()

    def wait(self, seconds=5.0):
        """Reads until the stream ends or is reset; returns grpc-status (int) or None."""
        self.sock.settimeout(seconds)
        deadline = time.time() + seconds
        while not self.ended and time.time() < deadline:
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            self.receive(chunk)
        status = self.trailers.get("grpc-status", self.headers.get("grpc-status"))
        return None if status is None else int(status)

    def receive(self, chunk):
        """Takes in what the server sent: headers, messages, trailers, the stream's end."""
        import h2.events
        for event in self.conn.receive_data(chunk):
            if isinstance(event, h2.events.ResponseReceived):
                self.headers.update(dict(event.headers))
            elif isinstance(event, h2.events.TrailersReceived):
                self.trailers.update(dict(event.headers))
            elif isinstance(event, h2.events.DataReceived):
                self.data += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                    event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.reset = event.error_code
                self.ended = True
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True
        self.flush()

    def message(self):
        return self.trailers.get("grpc-message", self.headers.get("grpc-message", ""))

    def close(self):
        self.sock.close()
