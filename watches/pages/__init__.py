"""The person's server-rendered pages: views, forms, the page cache and the chart."""
