"""The daemon process: where it listens, who may connect, and its lifetime.

- `anvild.daemon.namespace`  the plan9port namespace directory, the pid lock, the TCP token;
- `anvild.daemon.datadir`    the data directory's checks and its one-daemon lock;
- `anvild.daemon.logs`       logging: JSON lines to a rotating file, secrets redacted;
- `anvild.daemon.llama`      the embedded default model: llama-server as a supervised child;
- `anvild.daemon.listeners`  Unix and TCP listeners, listen addresses, peer credentials;
- `anvild.daemon.fdlimit`, `gcpolicy`  process-wide descriptor limit and collector policy;
- `anvild.daemon.wiring`     the session layer, the tree (`anvild.tree`) and the coordination
                             tools (`anvild.coord`) put together;
- `anvild.daemon.app`        `Daemon`: all of the above under one nursery.
"""
