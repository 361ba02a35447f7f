"""What a plan runs on: devices, links and storage declarations (`hardware`), and the collective
algorithms priced on links (`collectives`). Bottom layer, beside `model`.
"""
