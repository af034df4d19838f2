#!/usr/bin/env bash
# Round 10: round 9's runs plus the bursts scenario (both variants) in the middle.
cd "$(dirname "$0")/../../../.." || exit 1
export L=var/learn11 STAGE_SECONDS=30
mkdir -p $L
lab/experiments/predictor-learning/train.sh weblog:tuned:2 game:tuned:2 social:tuned:2 weblog:default:2 bursts:default:2 game:default:2 social:default:2 bursts:social:2 weblog:default:2 game:default:2 social:default:2
lab/experiments/predictor-learning/holdout.sh default:2 social:2
echo DONE
