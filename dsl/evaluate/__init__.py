"""evaluate"""
