"""Export and serve, as in the Paddle 3.3 quick reference: jit.save with an
InputSpec (a dynamic batch), then paddle.inference's Config and
create_predictor, whose answers must be the trained model's.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`).
"""
import keel as paddle  # the one line that differs from the Paddle script

import os
import sys
import tempfile

import numpy as np

nn = paddle.nn


class Classifier(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(),
                                  nn.Linear(32, 3))

    def forward(self, x):
        return self.body(x)


paddle.seed(1)
model = Classifier()
rng = np.random.default_rng(4)
opt = paddle.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
for step in range(60):
    xb = rng.standard_normal((32, 8)).astype("float32")
    yb = (xb[:, 0] > 0).astype("int64") + (xb[:, 1] > 1).astype("int64")
    loss = nn.functional.cross_entropy(model(paddle.to_tensor(xb)),
                                       paddle.to_tensor(yb))
    loss.backward()
    opt.step()
    opt.clear_grad()

model.eval()
path = os.path.join(tempfile.mkdtemp(), "model")
paddle.jit.save(model, path,
                input_spec=[paddle.static.InputSpec([-1, 8], "float32")])

config = paddle.inference.Config(path + ".json", path + ".pdiparams")
config.disable_gpu()
predictor = paddle.inference.create_predictor(config)

x = rng.standard_normal((5, 8)).astype("float32")  # another batch size
handle = predictor.get_input_handle(predictor.get_input_names()[0])
handle.reshape(x.shape)
handle.copy_from_cpu(x)
predictor.run()
served = predictor.get_output_handle(
    predictor.get_output_names()[0]).copy_to_cpu()
with paddle.no_grad():
    eager = model(paddle.to_tensor(x)).numpy()
err = float(np.abs(served - eager).max())
print("served batch of %d: max |predictor - model| = %.3g" % (len(x), err))
sys.exit(0 if err < 1e-5 else 1)
