"""The studio pages: thin views that read a form, call a service and render or redirect.

Every view requires a signed-in person, the image routes included.
"""
