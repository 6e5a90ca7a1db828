"""The daemon: where it listens, who may connect, the tree it serves, and its lifetime.

- `anvild.daemon.namespace`  the plan9port namespace directory, the pid lock, the TCP token;
- `anvild.daemon.datadir`    the data directory's checks and its one-daemon lock;
- `anvild.daemon.logs`       logging: JSON lines to a rotating file, secrets redacted;
- `anvild.daemon.llama`      the embedded default model: llama-server as a supervised child;
- `anvild.daemon.listeners`  Unix and TCP listeners, listen addresses, peer credentials;
- `anvild.daemon.events`     the daemon's own events and their JSON lines;
- `anvild.daemon.root`       the root of the served tree;
- `anvild.daemon.app`        `Daemon`: all of the above wired together under one nursery.
"""
