#!/usr/bin/env python3
"""What a CUDA IPC mapping kept by another process does after its owner frees
the memory: the question behind host/lent.go (bench/NOTES.md, thirtieth
session).

Two processes, as the host and a plugin: the owner allocates with
cudaMalloc, exports each allocation, and the importer opens every handle and
keeps it mapped. Then:

  layouts  the owner frees and allocates again in several layouts (the same
           sizes, one allocation over two freed ones, smaller, larger); the
           importer opens the new handles beside the old mappings, and each
           line says whether that worked and where the new memory landed
  memory   the owner frees 4 GiB the importer still maps: the device's free
           memory before, after the owner's free, after the importer's unmap

  python3 scripts/ipc_mappings.py [layouts|memory ...]   (default: both)

Needs cupy and a GPU.
"""
import multiprocessing as mp
import sys
import time

MB = 1 << 20
GB = 1 << 30


def importer(conn):
    """Opens each handle it is sent and keeps the mapping; "close" unmaps the
    last one, None ends."""
    import cupy
    rt = cupy.cuda.runtime
    cupy.cuda.Device(0).use()
    last = None
    while True:
        msg = conn.recv()
        if msg is None:
            return
        if msg == "close":
            rt.ipcCloseMemHandle(last)
            conn.send(("closed", 0))
            continue
        try:
            last = rt.ipcOpenMemHandle(msg, 1)  # cudaIpcMemLazyEnablePeerAccess
            conn.send(("ok", last))
        except Exception as e:  # the driver's error, reported, not fatal
            conn.send(("error", str(e)))


def layouts(rt, share):
    cases = {
        "the same sizes": ([2048, 512], [2048, 512]),
        "two of 1 MB, then one of 2 MB": ([MB, MB], [2 * MB]),
        "8 MB, then 1 MB": ([8 * MB], [MB]),
        "1 MB, then 8 MB": ([MB], [8 * MB]),
        "four of 4 KB, then one of 16 KB": ([4096] * 4, [16384]),
        "64 MB, then 64 MB": ([64 * MB], [64 * MB]),
        "64 MB, then two of 32 MB": ([64 * MB], [32 * MB, 32 * MB]),
        "3 MB and 5 MB, then 5 MB and 3 MB": ([3 * MB, 5 * MB], [5 * MB, 3 * MB]),
        "mixed sizes": ([2048, 300000, 4 * MB, 70000, 12 * MB], [70000, 12 * MB, 2048, 4 * MB, 300000, 9 * MB]),
    }
    for name, (first, second) in cases.items():
        old = [rt.malloc(s) for s in first]
        for p in old:
            share(p)
        for p in old:
            rt.free(p)
        new = [rt.malloc(s) for s in second]
        opened = [share(p) for p in new]
        where = ["%#x%s" % (p, " (a freed address)" if p in old else "") for p in new]
        print(f"{name}: importer {[o[0] if o[0] == 'ok' else o[1] for o in opened]}; new at {where}", flush=True)
        for p in new:
            rt.free(p)
    p = rt.malloc(MB)
    print("the same handle opened twice:", share(p)[0], share(p)[0], flush=True)
    rt.free(p)


def memory(rt, share, conn):
    free0 = rt.memGetInfo()[0]
    p = rt.malloc(4 * GB)
    share(p)
    free1 = rt.memGetInfo()[0]
    rt.free(p)
    time.sleep(0.2)
    free2 = rt.memGetInfo()[0]
    conn.send("close")
    conn.recv()
    time.sleep(0.2)
    free3 = rt.memGetInfo()[0]
    print(f"free memory, GiB: {free0 / GB:.2f} at the start, {free1 / GB:.2f} with 4 GiB allocated and mapped, "
          f"{free2 / GB:.2f} after the owner's free, {free3 / GB:.2f} after the importer's unmap", flush=True)


def main():
    import cupy
    rt = cupy.cuda.runtime
    cupy.cuda.Device(0).use()
    which = sys.argv[1:] or ["layouts", "memory"]
    ctx = mp.get_context("spawn")
    conn, theirs = ctx.Pipe()
    proc = ctx.Process(target=importer, args=(theirs,))
    proc.start()

    def share(p):
        conn.send(rt.ipcGetMemHandle(p))
        return conn.recv()

    for w in which:
        if w == "layouts":
            layouts(rt, share)
        elif w == "memory":
            memory(rt, share, conn)
        else:
            sys.exit(f"unknown probe {w!r}: want layouts or memory")
    conn.send(None)
    proc.join()


if __name__ == "__main__":
    main()
