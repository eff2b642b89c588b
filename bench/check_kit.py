"""What bench's *_check.py programs share: checks that print ok or FAIL as they go and
the exit status the program ends with (0 only when every check held)."""


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures.append(what)

    def exit_status(self):
        if self.failures:
            print(f"{len(self.failures)} check(s) failed")
            return 1
        print("every check held")
        return 0
