"""Models the python tests share."""
import keel


class KeelNet(keel.nn.Layer):
    """A Python-defined model: sublayers by attribute, forward in Python."""

    def __init__(self):
        super().__init__()
        self.fc1 = keel.nn.Linear(6, 16)
        self.act = keel.nn.Tanh()
        self.fc2 = keel.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
