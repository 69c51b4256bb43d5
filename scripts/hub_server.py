"""A Hugging Face hub on 127.0.0.1 for `cli/tests/it/hub/` (#42): the
download protocol both `huggingface_hub` (Python) and the `hf-hub` crate
speak, over repos in a folder (`ROOT/ORG--NAME/...`, one commit each).

    python3 scripts/hub_server.py ROOT LOG [--gated ORG/NAME] [--token T]
                                  [--cut-once FILE] [--stall api|FILE]
                                  [--etag weak|md5|VALUE] [--commit VALUE]
                                  [--corrupt FILE] [--short FILE]
                                  [--refuse-after N] [--gzip] [--cdn]

Prints its port on the first line of stdout, then serves until killed.
- `GET|HEAD /ORG/NAME/resolve/REV/FILE`: REV is `main` or the commit.
  Small files answer 200 (206 for a Range) with `X-Repo-Commit` and the
  git blob SHA-1 as `ETag`; weight files (`.safetensors`, `.bin`) are LFS
  files: 302 to `/cdn/SHA256` with `X-Linked-Etag` (their SHA-256),
  `X-Linked-Size`, and `X-Repo-Commit`.
- `GET /api/models/ORG/NAME/revision/REV`: `{"id", "sha", "siblings"}`;
  `GET /api/models/ORG/NAME/tree/REV?...`: the file list Python's
  `snapshot_download` reads (`type`, `path`, `size`, `oid`, `lfs`).
- Errors as the hub sends them, with `X-Error-Code`: `RepoNotFound` (401
  without a token, 404 with one), 404 `RevisionNotFound` and
  `EntryNotFound`; a `--gated` repo's API answers, and its files are 401
  `GatedRepo` without `Authorization: Bearer T`.
- `--cut-once FILE`: the first full download of FILE's bytes stops halfway
  (the connection closes), as a network fault does; a resumed request
  (`Range: bytes=N-`) then gets the rest.
- `--stall api`: the API's requests get no answer, ever; `--stall FILE`:
  every GET of FILE's bytes sends its headers and half its body, then
  nothing more (a hub gone quiet; the connection stays open).
- `--etag weak`: every ETag and X-Linked-Etag in the weak form `W/"…"`;
  `--etag md5`: a small file's ETag is its MD5 (a checksum the client
  cannot check; LFS files keep their SHA-256 in X-Linked-Etag); any other
  VALUE is sent as it is as every file's ETag and X-Linked-Etag (a
  mirror's `../` or absolute path). `--commit VALUE`: every file's
  X-Repo-Commit is VALUE (the API still names the real commit).
- `--corrupt FILE`: FILE's bytes are served with their last byte changed
  (the same size, headers naming the true checksum); `--short FILE`: its
  body ends one byte before the size the headers announce, cleanly.
- `--refuse-after N`: after N requests the server stops listening (later
  connections are refused) and closes each connection after its answer.
- `--gzip`: a request that accepts gzip gets a file's bytes compressed
  (`Content-Encoding: gzip`, ranges and sizes of the compressed bytes), as
  a compressing proxy or CDN may send them.
- `--cdn`: LFS files' bytes are served by a second server on 127.0.0.1
  (another port, so another origin), as the hub's CDN is another host:
  the 302 names it and carries no `X-Linked-Size` (the size is the CDN's
  `Content-Range` total). Its requests are logged as
  `CDN METHOD PATH RANGE AUTHORIZATION` (`-` where none came).
- Every request is appended to LOG as `METHOD PATH RANGE`.
"""

import argparse
import gzip
import hashlib
import http.server
import json
import pathlib
import re
import sys
import threading

LFS = (".safetensors", ".bin")


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("log")
    parser.add_argument("--gated", action="append", default=[])
    parser.add_argument("--token", default="hf_good")
    parser.add_argument("--cut-once", default=None)
    parser.add_argument("--stall", default=None)
    parser.add_argument("--etag", default=None)
    parser.add_argument("--commit", default=None)
    parser.add_argument("--corrupt", default=None)
    parser.add_argument("--short", default=None)
    parser.add_argument("--refuse-after", type=int, default=None)
    parser.add_argument("--gzip", action="store_true")
    parser.add_argument("--cdn", action="store_true")
    args = parser.parse_args()

    repos: dict[str, dict[str, bytes]] = {}
    for folder in sorted(pathlib.Path(args.root).iterdir()):
        if folder.is_dir() and "--" in folder.name:
            files = {p.relative_to(folder).as_posix(): p.read_bytes()
                     for p in sorted(folder.rglob("*")) if p.is_file()}
            repos[folder.name.replace("--", "/", 1)] = files
    commits = {repo: hashlib.sha1(json.dumps(
        {n: git_sha1(d) for n, d in files.items()}, sort_keys=True).encode()).hexdigest()
        for repo, files in repos.items()}
    blobs = {hashlib.sha256(d).hexdigest(): d
             for files in repos.values() for n, d in files.items() if n.endswith(LFS)}
    lock = threading.Lock()
    state = {"cut": args.cut_once, "served": 0}

    def etag(value: str) -> str:
        """An ETag or X-Linked-Etag as the fault mode sends it."""
        if args.etag is None or args.etag == "md5":
            return f'"{value}"'
        if args.etag == "weak":
            return f'W/"{value}"'
        return args.etag

    def served(name: str, data: bytes) -> bytes:
        """FILE's bytes as `--corrupt` sends them."""
        if name == args.corrupt and data:
            return data[:-1] + bytes([data[-1] ^ 0x5A])
        return data

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def send(self, code, headers, body=b""):
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def error(self, code, kind, extra=None):
            self.send(code, {"X-Error-Code": kind, "X-Error-Message": kind, **(extra or {})})

        def ranged(self, data, headers, name):
            if args.gzip and "gzip" in self.headers.get("Accept-Encoding", ""):
                data = gzip.compress(data, mtime=0)
                headers = {**headers, "Content-Encoding": "gzip"}
            n = len(data)
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            start, end = (int(m[1]), min(int(m[2] or n - 1), n - 1)) if m else (0, n - 1)
            if m and n == 0:
                return self.send(200, {**headers, "Content-Range": "bytes */0"})
            if m and start >= n:
                return self.send(416, {"Content-Range": f"bytes */{n}"})
            body = data[start:end + 1]
            code = 206 if m else 200
            if m:
                headers = {**headers, "Content-Range": f"bytes {start}-{end}/{n}"}
            if self.command == "GET" and name == args.short and end == n - 1 and len(body) > 1:
                # Clean, one byte short of what Content-Range announced.
                body = body[:-1]
            if self.command == "GET" and args.stall == name and len(body) > 1:
                self.send_response(code)
                for k, v in {**headers, "Accept-Ranges": "bytes"}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                threading.Event().wait()
            cut = False
            with lock:
                if (self.command == "GET" and state["cut"] == name and start == 0
                        and len(body) == n and n > 1):
                    state["cut"] = None
                    cut = True
            if not cut:
                return self.send(code, {**headers, "Accept-Ranges": "bytes"}, body)
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)

        def do_GET(self):
            if cdn is not None and self.server is cdn:
                with lock, open(args.log, "a") as log:
                    log.write(f"CDN {self.command} {self.path} {self.headers.get('Range', '-')} "
                              f"{self.headers.get('Authorization', '-')}\n")
                return self.answer()
            with lock, open(args.log, "a") as log:
                log.write(f"{self.command} {self.path} {self.headers.get('Range', '-')}\n")
                state["served"] += 1
                nth = state["served"]
            if nth == args.refuse_after:
                # Stops listening before this answer goes out, so that the
                # client's next connection is refused.
                stop()
            self.answer()

        def end_headers(self):
            if args.refuse_after is not None:
                # No connection is kept for a later request.
                self.send_header("Connection", "close")
            super().end_headers()

        def answer(self):
            api = (re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", self.path)
                   or re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^?]+)(?:\?.*)?", self.path))
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
            if self.path.startswith("/cdn/"):
                sha = self.path[5:]
                if sha not in blobs:
                    return self.error(404, "EntryNotFound")
                repo, name = next((r, n) for r, files in repos.items()
                                  for n, d in files.items()
                                  if n.endswith(LFS) and hashlib.sha256(d).hexdigest() == sha)
                return self.ranged(served(name, blobs[sha]), {
                    "ETag": etag(sha), "X-Repo-Commit": args.commit or commits[repo]}, name)
            if api and args.stall == "api":
                threading.Event().wait()
            repo = (api or resolve)[1] if (api or resolve) else None
            authorized = self.headers.get("Authorization") == f"Bearer {args.token}"
            if repo not in repos:
                # As the hub answers: 401 without a token, 404 with one.
                return self.error(404 if authorized else 401, "RepoNotFound")
            if resolve and repo in args.gated and not authorized:
                return self.error(401, "GatedRepo")
            commit = commits[repo]
            revision = (api or resolve)[2].replace("%2F", "/")
            if revision not in ("main", commit):
                return self.error(404, "RevisionNotFound")
            if api and "/tree/" in self.path:
                body = json.dumps([{
                    "type": "file", "path": n, "size": len(d), "oid": git_sha1(d),
                    **({"lfs": {"size": len(d), "oid": hashlib.sha256(d).hexdigest(),
                                "pointerSize": 134}} if n.endswith(LFS) else {})}
                    for n, d in repos[repo].items()]).encode()
                return self.send(200, {"Content-Type": "application/json"}, body)
            if api:
                body = json.dumps({"id": repo, "sha": commit, "siblings": [
                    {"rfilename": n} for n in repos[repo]]}).encode()
                return self.send(200, {"Content-Type": "application/json"}, body)
            name = resolve[3]
            if name not in repos[repo]:
                return self.error(404, "EntryNotFound", {"X-Repo-Commit": commit})
            data = repos[repo][name]
            file_commit = args.commit or commit
            if name.endswith(LFS):
                sha = hashlib.sha256(data).hexdigest()
                host = self.headers.get("Host", f"127.0.0.1:{self.server.server_port}")
                if cdn is not None:
                    return self.send(302, {
                        "Location": f"http://127.0.0.1:{cdn.server_port}/cdn/{sha}",
                        "X-Repo-Commit": file_commit, "X-Linked-Etag": etag(sha),
                        "ETag": etag(git_sha1(data))})
                return self.send(302, {
                    "Location": f"http://{host}/cdn/{sha}", "X-Repo-Commit": file_commit,
                    "X-Linked-Etag": etag(sha), "X-Linked-Size": str(len(data)),
                    "ETag": etag(git_sha1(data))})
            tag = (f'"{hashlib.md5(data).hexdigest()}"' if args.etag == "md5"
                   else etag(git_sha1(data)))
            self.ranged(served(name, data), {"ETag": tag, "X-Repo-Commit": file_commit}, name)

        do_HEAD = do_GET

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            # A connection --cut-once closed is not the server's fault.
            if not isinstance(sys.exc_info()[1], OSError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    cdn = Server(("127.0.0.1", 0), Handler) if args.cdn else None
    if cdn is not None:
        threading.Thread(target=cdn.serve_forever, daemon=True).start()

    def stop():
        # `--refuse-after`: no more connections; the port then refuses.
        server.shutdown()
        server.server_close()

    print(server.server_port, flush=True)
    # The reader may close its end after the port: nothing more is printed.
    sys.stdout.close()
    server.serve_forever()
    # `--refuse-after` stopped it: answers in flight still go out.
    threading.Event().wait()


if __name__ == "__main__":
    main()
