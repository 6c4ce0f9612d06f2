"""prune"""
