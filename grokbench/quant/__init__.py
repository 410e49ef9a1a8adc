"""The quantization lab (Bondarenko et al. 2023): train the attention variants, measure, PTQ.

Modules, each importing only the ones before it: `config` (`QuantConfig`, its variants,
bit widths and hashes), `recipes` (the lab's recipe and the paper's ablations, in the
harness's recipe language), `train` (cached training), `evaluate` (perplexity, outlier
metrics, simulated PTQ), `table` (`run_quant`: a recipe's runs, quant_table.json and .md;
`run_ablations`: the ablation recipes). Runs live in the harness's `grokbench.store.Store`
under ROOT/quant/{train,eval}/HASH.
"""

from grokbench.quant.config import QuantConfig as QuantConfig
from grokbench.quant.config import parse_bit_list as parse_bit_list
from grokbench.quant.recipes import ABLATIONS as ABLATIONS
from grokbench.quant.table import format_tap_costs as format_tap_costs
from grokbench.quant.table import parse_quant_overrides as parse_quant_overrides
from grokbench.quant.table import quant_configs as quant_configs
from grokbench.quant.table import run_ablations as run_ablations
from grokbench.quant.table import run_quant as run_quant
from grokbench.quant.table import run_tap_costs as run_tap_costs
