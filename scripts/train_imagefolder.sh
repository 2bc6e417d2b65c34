#!/usr/bin/env bash
# The seeds' image-recognition workflow as one command (issue 28, docs/image-folders.md):
# an ImageFolder of images, Resize((224, 224)) and ToTensor(), torchvision's ResNet-50,
# Adam at 1e-3, batch 32, data-parallel over the GPUs present (one replica where there is
# none). Installs and builds what it needs (the library and the dpcore command, as
# scripts/train.sh). Without --folder it trains on real images on any machine: Fashion-MNIST
# written once as an ImageFolder of PNGs into data/fashion-png (scripts/make_imagefolder.py).
#
#   scripts/train_imagefolder.sh [--recipe seeds|cpu] [--folder DIR] [dpcore train flags...]
#
# --recipe cpu: the shorter recipe for a CPU: ResNet-18 at 64x64 (RandomResizedCrop(64) and
# RandomHorizontalFlip() for training, Resize((64, 64)) for the test set), Adam 1e-3, batch
# 32, 3 epochs, 2 loader threads. --folder DIR: DIR/train and DIR/test in ImageFolder layout.
# Flags after these go to `dpcore train` and replace the recipe's (--steps 20 for a look).
set -euo pipefail
cd "$(dirname "$0")/.."
recipe=seeds folder=
while [ $# -gt 0 ]; do
  case $1 in
    --recipe) recipe=$2; shift 2 ;;
    --folder) folder=$2; shift 2 ;;
    *) break ;;
  esac
done
case $recipe in
  seeds | cpu) ;;
  *) echo "scripts/train_imagefolder.sh: --recipe $recipe: expected seeds or cpu" >&2; exit 2 ;;
esac
scripts/install-deps.sh --train
scripts/build.sh dpcore_cli
if [ -z "$folder" ]; then
  folder=data/fashion-png
  [ -d $folder ] || /usr/bin/python3 scripts/make_imagefolder.py fashion-mnist $folder
fi
for split in train test; do
  [ -d "$folder/$split" ] || { echo "scripts/train_imagefolder.sh: $folder/$split: no such folder (expected an ImageFolder per split)" >&2; exit 2; }
done
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # as scripts/train.sh
user=("$@")
args=()
# A flag of the recipe with its value, unless the caller gives that flag (dpcore refuses a
# flag given twice): the caller's flags replace the recipe's.
recipe_flag() {
  local flag=$1 given
  for given in "${user[@]}"; do
    if [ "$given" = "$flag" ] || [[ $given == "$flag="* ]]; then return 0; fi
  done
  args+=("$@")
}
recipe_flag --data "imagefolder:$folder/train"
recipe_flag --val-data "imagefolder:$folder/test"
recipe_flag --optimizer adam
recipe_flag --lr 1e-3
recipe_flag --batch 32
if [ $recipe = seeds ]; then
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
  recipe_flag --model resnet50
  recipe_flag --transform "Resize((224, 224)),ToTensor()"
  recipe_flag --val-transform "Resize((224, 224)),ToTensor()"
  recipe_flag --workers 4
  if [ "$gpus" -gt 0 ]; then
    recipe_flag --device cuda
    recipe_flag --replicas "$gpus"
  else
    recipe_flag --device cpu
  fi
else
  recipe_flag --model resnet18
  recipe_flag --transform "RandomResizedCrop(64),RandomHorizontalFlip(),ToTensor()"
  recipe_flag --val-transform "Resize((64, 64)),ToTensor()"
  recipe_flag --epochs 3
  recipe_flag --workers 2
  recipe_flag --device cpu
fi
exec build/bin/dpcore train "${args[@]}" "$@"
