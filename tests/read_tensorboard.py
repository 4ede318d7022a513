"""Reads a TensorBoard log directory with TensorBoard's own reader (its EventAccumulator and the
hparams plugin's protos) and prints, as JSON, what the tests check: the scalar tags, the text
summaries and the hparams plugin's session start info (null where there is none).

    read_tensorboard.py LOG_DIR
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util


def plugin_content(accumulator, plugin):
    try:
        return accumulator.PluginTagToContent(plugin)
    except KeyError:  # no summary of that plugin
        return {}


def main(log_dir):
    accumulator = event_accumulator.EventAccumulator(log_dir, size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    text = {}
    for tag in plugin_content(accumulator, "text"):
        array = tensor_util.make_ndarray(accumulator.Tensors(tag)[-1].tensor_proto)
        text[tag] = [item.decode("utf-8") for item in array.flatten()]
    hparams = None
    for tag, content in plugin_content(accumulator, "hparams").items():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") == "session_start_info":
            hparams = {}
            for name, value in data.session_start_info.hparams.items():
                hparams[name] = getattr(value, value.WhichOneof("kind"))
    print(json.dumps({"scalars": accumulator.Tags()["scalars"], "text": text, "hparams": hparams}))


if __name__ == "__main__":
    main(sys.argv[1])
