"""The group coordinator: classic consumer groups and offsets in __consumer_offsets."""
