"""Per-architecture access to each layer's attention and FFN linears, and the head/neuron surgery that every
other module builds on.

- `table`: the architecture table (one entry per architecture: module paths, quirks) and config readers
- `parts`: `LayerParts`, one layer's linears and norms (the table's entries and `layers` both name it)
- `layers`: each layer's linears and norms (`LayerParts`), original unit ids, the mask shape
- `stubs`: exact stand-ins for a sublayer left with 0 heads or 0 neurons
- `surgery`: keep heads / neurons / layers, shape records, widen back to the unpruned shape
- `flops`: FLOPs per pair (split by unit) and parameter counts
"""
from headcut.arch.table import (ARCHITECTURES, SUPPORTED, Architecture, architecture, attention_implementation,
                                config_problem, head_size, intermediate_size, model_type, num_heads_config,
                                takes_token_types, usable_positions)
from headcut.arch.stubs import (HeadlessAttention, HeadlessSelfAttention, NeuronlessFFN, NeuronlessIntermediate,
                                NeuronlessOutput)
from headcut.arch.parts import LayerParts
from headcut.arch.layers import (HEAD_IDS, LAYER_ID, NEURON_IDS, after_attention, encoder_layers, heads_per_layer,
                                 layer_ids, layer_parts, mask_shape, module_at, neurons_per_layer, present_heads,
                                 set_encoder_layers, set_module_at)
from headcut.arch.surgery import apply_shape, keep_heads, keep_layers, keep_neurons, shape_record, widen
from headcut.arch.flops import UnitFlops, count_parameters, flops_per_pair, unit_flops

__all__ = [
    "ARCHITECTURES", "SUPPORTED", "Architecture", "architecture", "attention_implementation", "config_problem",
    "head_size", "intermediate_size", "model_type", "num_heads_config", "takes_token_types", "usable_positions",
    "HeadlessAttention", "HeadlessSelfAttention", "NeuronlessFFN", "NeuronlessIntermediate", "NeuronlessOutput",
    "HEAD_IDS", "LAYER_ID", "NEURON_IDS", "LayerParts", "after_attention", "encoder_layers", "heads_per_layer",
    "layer_ids", "layer_parts", "mask_shape", "module_at", "neurons_per_layer", "present_heads",
    "set_encoder_layers", "set_module_at",
    "apply_shape", "keep_heads", "keep_layers", "keep_neurons", "shape_record", "widen",
    "UnitFlops", "count_parameters", "flops_per_pair", "unit_flops",
]
