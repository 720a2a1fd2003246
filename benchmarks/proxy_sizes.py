"""The real sets' sizes that shape_proxy.py builds proxies of, apart so that cost_next.py (which shape_proxy.py
imports) can name the sets with a proxy without importing shape_proxy back."""

# dataset: (training points, test points, mean labels per point), from the XC repository's table
XC_SIZES = {
    "delicious": (12_920, 3_185, 19.03),  # real data here too (the mirror): studies/shape_proxy_check
    "amazoncat-13k": (1_186_239, 306_782, 5.04),
    "wiki10-31k": (14_146, 6_616, 18.64),
    "delicious-200k": (196_606, 100_095, 75.54),
    "wikilshtc-325k": (1_778_351, 587_084, 3.19),
    "wikipedia-500k": (1_813_391, 783_743, 4.77),
    "amazon-670k": (490_449, 153_025, 5.45),
}


# dataset: (users, items, interactions) after the paper's filters, from the MIDX paper's Table 6
SEQ_SIZES = {
    "movielens-10m": (69_585, 9_176, 8_233_567),
    "gowalla": (52_986, 121_867, 3_301_571),
    "amazon-books": (68_498, 65_549, 2_954_716),
}
