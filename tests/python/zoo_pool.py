"""The coverage zoo: a Python program whose multiprocessing Pool of WORKERS forked
processes runs TASKS tasks of pure-Python work (about MS milliseconds of CPU each), while
the parent waits. It prints its own truth: the CPU time the tasks took in the workers
(each measures its own with time.thread_time), the parent's own CPU time and the tree's
(the parent's and its reaped children's, from getrusage).

    python3 zoo_pool.py WORKERS TASKS MS -> "task_ns=N parent_ns=N tree_ns=N"
"""
import multiprocessing
import resource
import sys
import time


def task(ms):
    t0 = time.thread_time_ns()
    end = t0 + ms * 1_000_000
    x = 1
    while time.thread_time_ns() < end:
        for _ in range(1000):
            x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
    return time.thread_time_ns() - t0


def main():
    workers, tasks, ms = (int(a) for a in sys.argv[1:4])
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        task_ns = sum(pool.map(task, [ms] * tasks, chunksize=1))
        pool.close()
        pool.join()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    parent = own.ru_utime + own.ru_stime
    tree = parent + kids.ru_utime + kids.ru_stime
    print(f"task_ns={task_ns} parent_ns={int(parent * 1e9)} tree_ns={int(tree * 1e9)}")


if __name__ == "__main__":
    main()
