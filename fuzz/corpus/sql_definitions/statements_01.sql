drop counter "Blog Posts"
