// placeholder: the page's script replaces it
